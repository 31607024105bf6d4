"""Time for the model: one `Clock` seam, a virtual clock and a dilated real clock.

All model code (links, engines, scheduler, workload) reads time only through a `Clock`; the
engines and the fabric use only `now()` and `call_at()` (they are state machines), so
`dualpath sim` runs them on `VirtualCore` (model/core/virtual_core.py), a timer heap without
asyncio. `VirtualClock` runs on `VirtualTimeLoop`, an asyncio loop that jumps straight to the
next timer whenever nothing is runnable, for code that needs coroutines on virtual time.
`RealClock` is for the process runtime: emulated seconds = wall seconds x dilation, read from
`perf_counter` (uvloop's `loop.time()` ticks in whole milliseconds), with a lag meter that
records how late the host woke us up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from dualpath.model.core.lag import LagMeter
from dualpath.model.core.virtual_loop import SimulationDeadlockError, VirtualTimeLoop

__all__ = [
    "Clock",
    "RealClock",
    "SimulationDeadlockError",
    "TimerHandle",
    "VirtualClock",
    "VirtualTimeLoop",
    "run_virtual",
]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Emulated time. Every value is in emulated seconds."""

    def now(self) -> float: ...

    async def sleep(self, dt: float) -> None: ...

    async def sleep_until(self, t: float) -> None: ...

    def call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle: ...

    def create_future(self) -> asyncio.Future[None]: ...

    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    @property
    def dilation(self) -> float: ...


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
        await self._sleep(max(0.0, dt))

    async def sleep_until(self, t: float) -> None:
        await self._sleep(max(0.0, t - self._loop._vtime))

    async def _sleep(self, delay: float) -> None:
        """`asyncio.sleep(delay)` step for step (so runs are identical), but on this clock's
        loop instead of `get_running_loop()`: on CPython 3.11 that is a getpid() syscall,
        and a turn sleeps several times."""
        if delay <= 0:
            await asyncio.sleep(0)
            return
        loop = self._loop
        fut: asyncio.Future[None] = loop.create_future()
        handle = loop.call_at(loop._vtime + delay, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()

    def call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_at(max(t, self._loop.time()), callback)

    def create_future(self) -> asyncio.Future[None]:
        return self._loop.create_future()

    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self._loop.create_task(coro)


def _wake(fut: asyncio.Future[None]) -> None:
    """What `asyncio.sleep`'s timer does: wake the sleeper unless it was cancelled."""
    if not fut.cancelled():
        fut.set_result(None)


# Sleeping for less than this is pointless: stdlib oversleeps ~1 ms, uvloop undersleeps
# (measured in docs/clock.md). Shorter waits are batched by the absolute schedule.
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

    def at_wall(self, wall: float) -> float:
        """The emulated time of a past `time.perf_counter()` reading."""
        return (wall - self._t0) * self._dilation

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

    def create_future(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)


def run_virtual(main: Callable[[VirtualClock], Any]) -> Any:
    """Run coroutine factory `main(clock)` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        clock = VirtualClock(loop)
        return loop.run_until_complete(main(clock))
    finally:
        loop.close()
