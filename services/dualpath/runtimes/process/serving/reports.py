"""Batched reports from a node to the scheduler: one RPC carries every report produced
since the previous one, so the RPC count does not grow with the request rate.

A failed send is retried with capped exponential backoff (the scheduler restarting, a
burst that timed the call out): a lost report would leave a turn hanging until its
deadline, but a node that died over it would fail every turn it holds. Pending reports are
bounded; past the bound the oldest are dropped and counted (their turns fail at their
deadline on the scheduler, explicitly), and `on_dropped` runs once a batch is delivered
again: a reporter whose reports are state, not events (a unit's forward), re-sends it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dualpath.rpc.v1 import scheduler_pb2
from dualpath.runtimes.process.serving.peers import Peers

log = logging.getLogger(__name__)

MAX_PENDING = 100_000  # reports kept while the scheduler cannot be reached
BACKOFF_S = (0.05, 2.0)  # first retry delay, cap


class ReportSender:
    def __init__(self, peers: Peers, timeout_s: float, max_pending: int = MAX_PENDING):
        self._peers = peers
        self._timeout = timeout_s
        self._max_pending = max_pending
        self._pending: list[scheduler_pb2.Report] = []
        # Run after the first delivery that follows a drop (the scheduler is reachable
        # again): what the dropped reports said may now be stale on the scheduler.
        self.on_dropped: Callable[[], None] | None = None
        self._resync = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.retries = 0
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def send(self, report: scheduler_pb2.Report) -> None:
        self._pending.append(report)
        if len(self._pending) > self._max_pending:
            drop = len(self._pending) - self._max_pending
            del self._pending[:drop]
            self.dropped += drop
            self._resync = True
        self._wake.set()

    async def _run(self) -> None:
        stub = self._peers.scheduler()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            await self._deliver(stub, batch)

    async def _deliver(self, stub: Any, batch: list[scheduler_pb2.Report]) -> None:
        delay = BACKOFF_S[0]
        while True:
            try:
                await stub.Report(scheduler_pb2.ReportBatch(reports=batch), timeout=self._timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.retries += 1
                log.warning(
                    "report batch of %d not delivered (%s); retry in %.2f s",
                    len(batch),
                    type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(BACKOFF_S[1], delay * 2)
                stub = self._peers.scheduler()  # the scheduler may have a new address
                continue
            self.batches += 1
            if self._resync:
                self._resync = False
                if self.on_dropped is not None:
                    self.on_dropped()  # its reports go in the next batch
            return

    async def stop(self) -> None:
        """Send what is pending, then stop."""
        if self._task is None:
            return
        if self._pending and not self._task.done():
            self._wake.set()
            for _ in range(50):
                if not self._pending:
                    break
                await asyncio.sleep(0.01)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
