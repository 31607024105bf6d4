"""Server-sent events for streamed completions.

Streaming semantics: the first token is sent as soon as the backend reports it; with a
backend that reports decode progress (`StreamingBackend`, the live cluster) every later
token is sent when the backend says it exists, which it does at the token's emulated time,
so a client measures the emulated TTST and TPOT (within the dilation and the host's lag).
Tokens that pile up while a write is in progress go out together in one chunk. With a
backend that does not report progress, the rest arrive together when the turn completes.
Errors found before the first byte are ordinary HTTP errors; after it they become an
in-stream `data: {"error": ...}` event (the OpenAI SDKs raise on it). A client that hangs
up before the turn ends stops the writing and, through `Hangups`, asks the backend to
cancel the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, Self

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from dualpath.runtimes.process.frontdoor.backend import Hangups, TurnResult, TurnSpec
from dualpath.runtimes.process.frontdoor.errors import ApiError
from dualpath.runtimes.process.frontdoor.turns import TurnRunner

Chunk = Mapping[str, Any]
PING_INTERVAL_S = 15.0  # a comment line that keeps idle proxies from closing a slow turn
SEND_TIMEOUT_S = 120.0  # a client that reads nothing for this long is dropped


class ChunkMaker(Protocol):
    def first(self, token: str) -> Sequence[Chunk]: ...

    def more(self, tokens: list[str]) -> Sequence[Chunk]: ...

    def rest(self, tokens: list[str], result: TurnResult) -> Sequence[Chunk]: ...


class SseWriter:
    """The event stream of one response, framed by aiohttp-sse: `data: <json>\n\n` per
    chunk (the OpenAI wire format), a `: ping` comment every PING_INTERVAL_S while a turn is
    slow (the SDKs and browsers skip comments), and a write stalled for SEND_TIMEOUT_S
    aborts the connection instead of hanging. A client that went away only ends the
    writing (`connected`): aiohttp cancels its handler next (`handler_cancellation`), which
    is how `Hangups` sees it. Use as `async with SseWriter(request) as sse:`, which ends the
    ping task."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response = EventSourceResponse(
            sep="\n",
            allow_all_methods=True,  # completions stream from a POST
            ping_interval=PING_INTERVAL_S,
            send_timeout=SEND_TIMEOUT_S,
        )
        # aiohttp-sse forces `Connection: keep-alive`, and aiohttp only writes its own
        # header when none is set: without this, a response to `Connection: close` (or one
        # sent while the server shuts down) would say keep-alive and then close anyway.
        del self.response.headers["Connection"]
        self.connected = True

    async def __aenter__(self) -> Self:
        if self._request.transport is None:  # gone already (aiohttp-sse raises the same)
            raise asyncio.CancelledError
        with self._gone_on_error():
            await self.response.prepare(self._request)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            self.response.stop_streaming()  # ends the ping task
        except RuntimeError:  # never started: the headers did not go out
            return
        await self.response.wait()

    async def send(self, payload: Chunk) -> None:
        if self.connected:
            with self._gone_on_error():
                await self.response.send(json.dumps(payload, separators=(",", ":")))

    async def close(self) -> None:
        if self.connected:
            with self._gone_on_error():
                await self.response.send("[DONE]")
                await self.response.write_eof()

    @contextmanager
    def _gone_on_error(self) -> Iterator[None]:
        try:
            yield
        except (ConnectionError, TimeoutError):  # gone, or stalled past SEND_TIMEOUT_S
            self.connected = False


class _Progress:
    """How many tokens of the turn exist; `changed` is set when that grows."""

    def __init__(self) -> None:
        self.known = 0
        self.changed = asyncio.Event()

    def advance(self, n: int) -> None:
        if n > self.known:
            self.known = n
            self.changed.set()


async def stream_turn(
    request: web.Request,
    runner: TurnRunner,
    spec: TurnSpec,
    tokens: Callable[[int], list[str]],
    chunks: ChunkMaker,
    hangups: Hangups,
) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    progress = _Progress()

    # call_soon_threadsafe: correct whether the backend calls back from the loop or not.
    def on_first_token() -> None:
        loop.call_soon_threadsafe(progress.advance, 1)

    def on_tokens(n: int, _emulated_t: float) -> None:
        loop.call_soon_threadsafe(progress.advance, n)

    task = runner.start(spec, on_first_token, on_tokens)
    with hangups.watch(spec, task, lambda: request.transport is None):
        return await _stream(request, task, progress, tokens, spec.gen_tokens, chunks)


async def _until(task: asyncio.Task[TurnResult], progress: _Progress) -> None:
    """Wait for more tokens or the end of the turn, whichever comes first."""
    if progress.changed.is_set() or task.done():
        return
    waiter = asyncio.ensure_future(progress.changed.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _stream(
    request: web.Request,
    task: asyncio.Task[TurnResult],
    progress: _Progress,
    tokens: Callable[[int], list[str]],
    gen: int,
    chunks: ChunkMaker,
) -> web.StreamResponse:
    text = tokens(gen)  # prefix-stable: token k is the same whatever the count
    await _until(task, progress)
    if progress.known < 1:
        task.result()  # a failure before any byte is sent is a plain HTTP error
    async with SseWriter(request) as sse:
        for chunk in chunks.first(text[0]):
            await sse.send(chunk)
        sent = await _relay(sse, task, progress, text, chunks)
        try:
            result = await asyncio.shield(task)
        except Exception as exc:  # headers are gone: report in-stream (the runner logs bugs)
            if not isinstance(exc, ApiError):
                exc = ApiError(500, "Internal error while streaming", type_="server_error")
            await sse.send(exc.body())
        else:
            if result.generated_tokens != len(text):
                text = tokens(result.generated_tokens)
            for chunk in chunks.rest(text[sent:], result):
                await sse.send(chunk)
        await sse.close()
    return sse.response


async def _relay(
    sse: SseWriter,
    task: asyncio.Task[TurnResult],
    progress: _Progress,
    text: list[str],
    chunks: ChunkMaker,
) -> int:
    """Send each token as soon as the backend reports it, until the turn ends; returns how
    many tokens went out (the first was sent already)."""
    sent = 1
    progress.changed.clear()
    while not task.done():
        await _until(task, progress)
        progress.changed.clear()
        upto = min(progress.known, len(text))
        if upto > sent and not task.done():  # at the end, the rest goes with the last chunk
            for chunk in chunks.more(text[sent:upto]):
                await sse.send(chunk)
            sent = upto
    return sent
