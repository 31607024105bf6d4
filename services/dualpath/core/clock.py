"""Time for the model: one `Clock` seam, a virtual clock and a dilated real clock.

All model code (links, engines, scheduler, workload) reads time only through a `Clock`.
`VirtualClock` runs on `VirtualTimeLoop`, an asyncio loop that jumps straight to the next
timer whenever nothing is runnable, so a whole cluster runs in one process much faster than
real time and deterministically for a seed. `RealClock` is for the process runtime: emulated
seconds = wall seconds x dilation, read from `perf_counter` (uvloop's `loop.time()` ticks in
whole milliseconds), with a lag meter that records how late the host woke us up.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable
from typing import Any, Protocol

from dualpath.core.lag import LagMeter


class SimulationDeadlockError(RuntimeError):
    """Every task waits and no timer is pending: the emulated cluster can never progress."""


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Emulated time. Every value is in emulated seconds."""

    def now(self) -> float: ...

    async def sleep(self, dt: float) -> None: ...

    async def sleep_until(self, t: float) -> None: ...

    def call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle: ...

    @property
    def dilation(self) -> float: ...


POLL_EVERY = 256  # virtual-time advances per non-blocking poll of the real fds


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real fds without blocking and advances the loop's virtual time instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._vloop = loop
        self._skipped = 0  # time advances since the real fds were last polled

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            # Callbacks are ready: the loop asks for a non-blocking poll between every two
            # batches of them. Nothing on a virtual loop does real I/O (only the self-pipe of
            # call_soon_threadsafe, whose callbacks are already queued), so skip the syscall
            # here; fds are still polled before a deadlock is declared.
            return []
        # Before virtual time moves, poll the real fds only every POLL_EVERY moves: the
        # syscall was ~10 % of a run, and all the self-pipe can bring (a signal handler's
        # callback) waits at most that many timer jumps, microseconds of wall time.
        self._skipped += 1
        if timeout is None or self._skipped >= POLL_EVERY:
            self._skipped = 0
            events = super().select(0)
            if events:
                return events
        if timeout is None:
            raise SimulationDeadlockError(
                "no runnable task and no pending timer: the emulated cluster is stuck "
                "(a resource waits for capacity that is never released)"
            )
        if timeout > 0:
            self._vloop.advance_to_next_timer()
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual and jumps to the next due timer.

    Only for the in-process runtime: never open sockets on it (grpc.aio does I/O outside
    the loop and would see time race ahead; see docs/clock.md).
    """

    def __init__(self) -> None:
        self._vtime = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._vtime

    def advance_to_next_timer(self) -> None:
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled:
            self._vtime = max(self._vtime, scheduled[0].when())


class VirtualClock:
    """Clock backed by a `VirtualTimeLoop`; timers go straight onto the loop's heap."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop

    @property
    def dilation(self) -> float:
        return 0.0

    def now(self) -> float:
        return self._loop.time()

    async def sleep(self, dt: float) -> None:
        await asyncio.sleep(max(0.0, dt))

    async def sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(0.0, t - self._loop.time()))

    def call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_at(max(t, self._loop.time()), callback)


# Sleeping for less than this is pointless: stdlib oversleeps ~1 ms, uvloop undersleeps
# (reference/emulation.md §3). Shorter waits are batched by the absolute schedule.
_MIN_SLEEP_WALL_S = 0.0015


class RealClock:
    """Emulated time = wall time since start x dilation (emulated seconds per wall second)."""

    def __init__(
        self, dilation: float = 1.0, lag: LagMeter | None = None, epoch: float | None = None
    ) -> None:
        """`epoch`: the `time.perf_counter()` value that is emulated t = 0. Processes of one
        run on one host pass the same epoch (perf_counter is CLOCK_MONOTONIC, system-wide on
        Linux), so their emulated timestamps compare."""
        if dilation <= 0:
            raise ValueError("dilation must be > 0 emulated seconds per wall second")
        self._dilation = dilation
        self._t0 = time.perf_counter() if epoch is None else epoch
        self.lag = lag or LagMeter()

    @property
    def dilation(self) -> float:
        return self._dilation

    def now(self) -> float:
        return (time.perf_counter() - self._t0) * self._dilation

    def _wall_of(self, t: float) -> float:
        return self._t0 + t / self._dilation

    async def sleep(self, dt: float) -> None:
        await self.sleep_until(self.now() + dt)

    async def sleep_until(self, t: float) -> None:
        wall_target = self._wall_of(t)
        ahead = wall_target - time.perf_counter()
        if ahead > _MIN_SLEEP_WALL_S:
            await asyncio.sleep(ahead)
        else:
            await asyncio.sleep(0)
        self.lag.record(max(0.0, self.now() - t))

    def call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        ahead = max(0.0, self._wall_of(t) - time.perf_counter())

        def fire() -> None:
            self.lag.record(max(0.0, self.now() - t))
            callback()

        if ahead <= _MIN_SLEEP_WALL_S:
            return loop.call_soon(fire)
        return loop.call_later(ahead, fire)


def run_virtual(main: Callable[[VirtualClock], Any]) -> Any:
    """Run coroutine factory `main(clock)` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        clock = VirtualClock(loop)
        return loop.run_until_complete(main(clock))
    finally:
        loop.close()
