"""Server-sent events for streamed completions.

Streaming semantics: the first token is sent as soon as the backend reports it; the rest
arrive together when the turn completes, because the emulated decode engines report a
request once, at its end, not token by token. Errors found before the first byte are
ordinary HTTP errors; after it they become an in-stream `data: {"error": ...}` event (the
OpenAI SDKs raise on it). A client that hangs up before the turn ends stops the writing
and, through `Hangups`, asks the backend to cancel the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from dualpath.frontdoor.backend import Hangups, TurnResult, TurnSpec
from dualpath.frontdoor.errors import ApiError
from dualpath.frontdoor.turns import TurnRunner

Chunk = Mapping[str, Any]


class ChunkMaker(Protocol):
    def first(self, token: str) -> Sequence[Chunk]: ...

    def rest(self, tokens: list[str], result: TurnResult) -> Sequence[Chunk]: ...


class SseWriter:
    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # proxies must not hold back the first token
            },
        )
        self.connected = True

    async def open(self) -> None:
        await self._write(None)

    async def send(self, payload: Chunk) -> None:
        await self._write(b"data: " + json.dumps(payload, separators=(",", ":")).encode())

    async def close(self) -> None:
        await self._write(b"data: [DONE]")
        if self.connected:
            try:
                await self.response.write_eof()
            except ConnectionError:
                self.connected = False

    async def _write(self, line: bytes | None) -> None:
        if not self.connected:
            return
        try:
            if line is None:
                await self.response.prepare(self._request)
            else:
                await self.response.write(line + b"\n\n")
        except ConnectionError:  # the client went away; aiohttp cancels the handler next
            self.connected = False


async def stream_turn(
    request: web.Request,
    runner: TurnRunner,
    spec: TurnSpec,
    tokens: Callable[[int], list[str]],
    chunks: ChunkMaker,
    hangups: Hangups,
) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    first = asyncio.Event()

    def on_first_token() -> None:
        # call_soon_threadsafe: correct whether the backend calls back from the loop or not.
        loop.call_soon_threadsafe(first.set)

    task = runner.start(spec, on_first_token)
    with hangups.watch(spec, task, lambda: request.transport is None):
        return await _stream(request, task, first, tokens, chunks)


async def _stream(
    request: web.Request,
    task: asyncio.Task[TurnResult],
    first: asyncio.Event,
    tokens: Callable[[int], list[str]],
    chunks: ChunkMaker,
) -> web.StreamResponse:
    waiter = asyncio.ensure_future(first.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        task.result()  # a failure before any byte is sent is a plain HTTP error
    sse = SseWriter(request)
    await sse.open()
    for chunk in chunks.first(tokens(1)[0]):
        await sse.send(chunk)
    try:
        result = await asyncio.shield(task)
    except Exception as exc:  # headers are gone: report in-stream (the runner logs bugs)
        if not isinstance(exc, ApiError):
            exc = ApiError(500, "Internal error while streaming", type_="server_error")
        await sse.send(exc.body())
    else:
        for chunk in chunks.rest(tokens(result.generated_tokens)[1:], result):
            await sse.send(chunk)
    await sse.close()
    return sse.response
