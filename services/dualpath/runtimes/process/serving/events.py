"""Append-only event history of a service, written to the run's Redis stream in batches.

Engine callbacks are synchronous, so records are queued here and a background task hands
them to the control plane's `EventBuffer` (which bounds memory by flushing, never drops).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from dualpath.runtimes.process.control import EventBuffer, EventLog


class EventSink:
    def __init__(self, log: EventLog, interval_s: float = 0.2) -> None:
        self._buffer: EventBuffer = log.buffer()
        self._queue: list[tuple[str, float, dict[str, Any]]] = []
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    def emit(self, kind: str, t: float, **fields: Any) -> None:
        self._queue.append((kind, t, fields))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _drain(self) -> None:
        queue, self._queue = self._queue, []
        for kind, t, fields in queue:
            await self._buffer.emit(kind, t, **fields)
        await self._buffer.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._drain()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._drain()
