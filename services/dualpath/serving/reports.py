"""Batched reports from a node to the scheduler: one RPC carries every report produced
since the previous one, so the RPC count does not grow with the request rate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dualpath.rpc.v1 import scheduler_pb2
from dualpath.serving.peers import Peers


class ReportSender:
    def __init__(self, peers: Peers, timeout_s: float, on_error: Callable[[BaseException], None]):
        self._peers = peers
        self._timeout = timeout_s
        self._on_error = on_error
        self._pending: list[scheduler_pb2.Report] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def send(self, report: scheduler_pb2.Report) -> None:
        self._pending.append(report)
        self._wake.set()

    async def _run(self) -> None:
        stub = self._peers.scheduler()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            try:
                await stub.Report(scheduler_pb2.ReportBatch(reports=batch), timeout=self._timeout)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # a lost report would leave a turn hanging forever
                self._on_error(exc)
                return
            self.batches += 1

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
