"""Streams follow a backend's token progress (`on_tokens`), one chunk per report; backends
without `on_tokens` keep the old contract (first token, then the rest at the end)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import openai
import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry

from dualpath.runtimes.process.frontdoor import TurnResult, TurnSpec, make_app
from dualpath.runtimes.process.frontdoor.backend import accepts_tokens
from tests.runtimes.process.frontdoor.conftest import BLOCK, MAX_GEN, MAX_PROMPT, MODEL, FakeBackend

STEP_S = 0.02


@dataclass
class PacedBackend:
    """Reports token n at arrival + n x STEP_S (wall = emulated here), like the cluster."""

    calls_with_tokens: int = 0

    async def run_turn(
        self,
        spec: TurnSpec,
        first_token: Callable[[], None] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
    ) -> TurnResult:
        t0 = time.perf_counter()
        self.calls_with_tokens += on_tokens is not None
        await asyncio.sleep(STEP_S)  # not a wait: the fake decode's pace is what streams
        if first_token is not None:
            first_token()
        for n in range(2, spec.gen_tokens + 1):
            await asyncio.sleep(STEP_S)
            if on_tokens is not None:
                on_tokens(n, time.perf_counter() - t0)
        t = time.perf_counter() - t0
        return TurnResult(
            request_id=1,
            session=spec.session,
            turn=spec.turn,
            prompt_tokens=spec.prompt_tokens,
            cached_tokens=0,
            generated_tokens=spec.gen_tokens,
            read_path="pe",
            arrival_s=0.0,
            first_token_s=STEP_S,
            second_token_s=2 * STEP_S,
            last_token_s=t,
        )


@pytest_asyncio.fixture
async def paced() -> AsyncIterator[tuple[openai.AsyncOpenAI, PacedBackend]]:
    backend = PacedBackend()
    app = make_app(
        backend,
        model=MODEL,
        block_tokens=BLOCK,
        max_prompt_tokens=MAX_PROMPT,
        max_gen_tokens=MAX_GEN,
        registry=CollectorRegistry(),
        extra_health=lambda: {},
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}/v1"
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0) as client:
        yield client, backend
    await runner.cleanup()


def test_backends_say_whether_they_report_tokens() -> None:
    assert accepts_tokens(PacedBackend())
    assert not accepts_tokens(FakeBackend(BLOCK))


@pytest.mark.asyncio
@pytest.mark.parametrize("chat", [True, False])
async def test_stream_sends_each_token_as_the_backend_reports_it(
    paced: tuple[openai.AsyncOpenAI, PacedBackend], chat: bool
) -> None:
    client, backend = paced
    gen = 12
    arrivals: list[float] = []
    pieces: list[str] = []
    last_extra: dict[str, object] = {}
    if chat:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=gen,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for c in stream:
            if c.choices and c.choices[0].delta.content:
                arrivals.append(time.perf_counter())
                pieces.append(c.choices[0].delta.content)
            last_extra = c.model_extra or {}
    else:
        legacy = await client.completions.create(
            model=MODEL, prompt="hi", max_tokens=gen, stream=True
        )
        async for lc in legacy:
            if lc.choices and lc.choices[0].text:
                arrivals.append(time.perf_counter())
                pieces.append(lc.choices[0].text)
            last_extra = lc.model_extra or {}
    assert backend.calls_with_tokens == 1
    assert len("".join(pieces).split()) == gen
    assert "dualpath" in last_extra
    # paced, not one burst at the end: most tokens in their own chunk, spread over the turn
    assert len(arrivals) >= gen // 2
    assert arrivals[-1] - arrivals[0] >= (gen - 1) * STEP_S * 0.5


@pytest.mark.asyncio
async def test_non_streamed_turns_do_not_ask_for_tokens(
    paced: tuple[openai.AsyncOpenAI, PacedBackend],
) -> None:
    client, backend = paced
    out = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert out.choices[0].message.content is not None
    assert len(out.choices[0].message.content.split()) == 5
    assert backend.calls_with_tokens == 0
