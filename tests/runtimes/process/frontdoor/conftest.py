"""A fake backend and a real-TCP front door to drive with real clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import openai
import pytest_asyncio
from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry

from dualpath.runtimes.process.frontdoor import TurnResult, TurnSpec, make_app

MODEL = "fake-model"
BLOCK = 4
MAX_PROMPT = 4096
MAX_GEN = 256


@dataclass
class FakeBackend:
    """Records specs; reports as cached the blocks it has already seen for the session."""

    block_tokens: int
    delay_s: float = 0.003
    fail: Exception | None = None
    gate: asyncio.Event | None = None  # if set, turns pause after their first token
    specs: list[TurnSpec] = field(default_factory=list)
    completed: int = 0
    seen_blocks: dict[int, int] = field(default_factory=dict)

    async def run_turn(
        self, spec: TurnSpec, first_token: Callable[[], None] | None = None
    ) -> TurnResult:
        if self.fail is not None:
            raise self.fail
        self.specs.append(spec)
        request_id = len(self.specs)
        await asyncio.sleep(self.delay_s)  # not a wait: the fake turn's work takes this long
        if first_token is not None:
            first_token()
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delay_s)  # (the rest of the fake turn's work)
        seen = self.seen_blocks.get(spec.session, 0)
        cached = min(spec.prompt_tokens, seen * self.block_tokens)
        self.seen_blocks[spec.session] = max(seen, spec.prompt_tokens // self.block_tokens)
        self.completed += 1
        arrival = float(request_id)
        second = arrival + 0.27
        return TurnResult(
            request_id=request_id,
            session=spec.session,
            turn=spec.turn,
            prompt_tokens=spec.prompt_tokens,
            cached_tokens=cached,
            generated_tokens=spec.gen_tokens,
            read_path="pe" if request_id % 2 else "de",
            arrival_s=arrival,
            first_token_s=arrival + 0.25,
            second_token_s=second,
            last_token_s=second + 0.02 * max(0, spec.gen_tokens - 2),
        )


@dataclass
class Server:
    base: str
    backend: FakeBackend
    registry: CollectorRegistry
    app: web.Application

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.base}/v1", api_key="x", max_retries=0)


async def start(max_inflight: int = 64) -> tuple[Server, web.AppRunner]:
    backend = FakeBackend(BLOCK)
    registry = CollectorRegistry()
    app = make_app(
        backend,
        model=MODEL,
        block_tokens=BLOCK,
        max_prompt_tokens=MAX_PROMPT,
        max_gen_tokens=MAX_GEN,
        registry=registry,
        extra_health=lambda: {"backend": "fake"},
        max_inflight=max_inflight,
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return Server(f"http://127.0.0.1:{port}", backend, registry, app), runner


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    srv, runner = await start()
    yield srv
    await runner.cleanup()


@pytest_asyncio.fixture
async def client(server: Server) -> AsyncIterator[openai.AsyncOpenAI]:
    async with server.openai() as c:
        yield c


@pytest_asyncio.fixture
async def http(server: Server) -> AsyncIterator[ClientSession]:
    async with ClientSession(base_url=server.base) as s:
        yield s
