"""A decode node's persists that the storage has not acknowledged yet, sent again until it
does (docs/faults.md, "Storage restart").

A write goes out once at once (node_io.py `RemoteDecodeUnit._write`). If it gets no
acknowledgement for a reason that passes (the storage was killed or restarts, it refused
the write because a gap before it had not filled or Redis did not take the index entry,
a deadline, too many calls), its ranges are kept here: ONE range per session, since a
session's ranges merge (re-sending a stored block is a no-op), so memory is bounded by the
sessions with unsettled blocks however many writes failed. One task sends every kept range
again in one Write, with capped exponential backoff, until the storage acknowledges them
or a range's deadline passes (then it is dropped and counted: later turns miss those
blocks). What the KV *is* comes from the session's chain, which the node keeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from dualpath.model.blocks import BlockRange
from dualpath.runtimes.process.serving.peers import UnknownPeerError

RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0  # the backoff doubles up to this: a restarted storage is found within it
MAX_RANGES_PER_WRITE = 512  # one message stays small; the rest goes in the next one

SendFn = Callable[[list[BlockRange], float], Awaitable[None]]  # (ranges, timeout_s)
DropFn = Callable[[BlockRange, str], None]


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code() in RETRYABLE
    return isinstance(exc, UnknownPeerError | ConnectionError | TimeoutError)


@dataclass(slots=True)
class _Kept:
    start: int
    stop: int
    deadline: float  # time.monotonic(): past it the range is dropped


class Persists:
    def __init__(
        self,
        send: SendFn,
        deadline_s: float,
        on_dropped: DropFn,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._send = send
        self._on_error = on_error  # a bug in the sender ends the node, loudly
        self._deadline_s = deadline_s
        self._on_dropped = on_dropped
        self.kept: dict[int, _Kept] = {}  # session -> the range still to acknowledge
        self._task: asyncio.Task[None] | None = None
        self.resent = 0  # writes sent again that the storage acknowledged
        self.dropped = 0  # ranges given up at their deadline or refused for good

    def keep(self, ranges: list[BlockRange]) -> None:
        """Keep `ranges` until acknowledged; starts the sender if it is idle."""
        deadline = time.monotonic() + self._deadline_s
        for r in ranges:
            k = self.kept.get(r.session)
            if k is None:
                self.kept[r.session] = _Kept(r.start, r.stop, deadline)
            else:  # the oldest failure's deadline bounds the merged range
                k.start, k.stop = min(k.start, r.start), max(k.stop, r.stop)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="persists")
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._on_error(task.exception())  # type: ignore[arg-type]

    async def _run(self) -> None:
        delay = FIRST_DELAY_S
        while self.kept:
            await asyncio.sleep(delay)
            self._expire()
            batch = list(self.kept.items())[:MAX_RANGES_PER_WRITE]
            if not batch:
                return
            sent = {s: (k.start, k.stop) for s, k in batch}
            timeout = max(0.001, min(k.deadline for _, k in batch) - time.monotonic())
            try:
                await self._send([BlockRange(s, a, b) for s, (a, b) in sent.items()], timeout)
            except (grpc.aio.AioRpcError, UnknownPeerError, ConnectionError, TimeoutError) as exc:
                if not retryable(exc):  # the storage refuses these blocks: a bug, counted
                    for s, (a, b) in sent.items():
                        self._drop(s, BlockRange(s, a, b), _why(exc))
                delay = min(MAX_DELAY_S, delay * 2)
                continue
            self.resent += 1
            delay = FIRST_DELAY_S
            for s, (a, b) in sent.items():
                k = self.kept.get(s)
                if k is not None and a <= k.start and k.stop <= b:  # nothing merged since
                    del self.kept[s]

    def _expire(self) -> None:
        now = time.monotonic()
        for s, k in list(self.kept.items()):
            if k.deadline <= now:
                self._drop(s, BlockRange(s, k.start, k.stop), "deadline passed")

    def _drop(self, session: int, rng: BlockRange, why: str) -> None:
        if self.kept.pop(session, None) is not None:
            self.dropped += 1
            self._on_dropped(rng, why)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _why(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)
