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
import heapq
import selectors
import time
from asyncio import base_events, format_helpers
from collections import deque
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any, Protocol, TypeVarTuple

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

    def create_future(self) -> asyncio.Future[None]: ...

    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    @property
    def dilation(self) -> float: ...


POLL_EVERY = 256  # virtual-time advances per non-blocking poll of the real fds
# When the stock iteration compacts its heap of timers (it drops cancelled ones).
_COMPACT_AT = base_events._MIN_SCHEDULED_TIMER_HANDLES  # type: ignore[attr-defined]
_COMPACT_FRACTION = base_events._MIN_CANCELLED_TIMER_HANDLES_FRACTION  # type: ignore[attr-defined]
_Ts = TypeVarTuple("_Ts")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real fds without blocking; the loop advances virtual time instead of waiting."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            # Callbacks are ready: the loop asks for a non-blocking poll between every two
            # batches of them. Nothing on a virtual loop does real I/O (only the self-pipe of
            # call_soon_threadsafe, whose callbacks are already queued), so skip the syscall
            # here; fds are still polled before a deadlock is declared.
            return []
        return self._vloop.jump(idle=timeout is None)

    def poll(self) -> list[tuple[selectors.SelectorKey, int]]:
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual and jumps to the next due timer.

    Only for the in-process runtime: never open sockets on it (grpc.aio does I/O outside
    the loop and would see time race ahead; see docs/clock.md).

    It keeps its timers itself, as `(when, handle)` pairs: heapq then compares the floats
    in C, where asyncio's heap of handles calls `TimerHandle.__lt__` (Python) a dozen times
    per push and pop. A pair compares below another exactly when its handle would (equal
    times fall through to the handles, which then compare as asyncio's do), so the heap
    takes the same shape and timers fire in the same order, ties included.
    """

    def __init__(self) -> None:
        self._vtime = 0.0
        self._skipped = 0  # time advances since the real fds were last polled
        self._timers: list[tuple[float, asyncio.TimerHandle]] = []
        self._vselector = _VirtualSelector(self)
        super().__init__(selector=self._vselector)

    def time(self) -> float:
        return self._vtime

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """`BaseEventLoop.call_at`, onto this loop's own heap."""
        self._check_closed()  # type: ignore[attr-defined]
        if self._debug:  # type: ignore[attr-defined]
            self._check_thread()  # type: ignore[attr-defined]
            self._check_callback(callback, "call_at")  # type: ignore[attr-defined]
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._timers, (when, timer))
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def call_soon(
        self, callback: Callable[[*_Ts], object], *args: *_Ts, context: Context | None = None
    ) -> asyncio.Handle:
        """`BaseEventLoop.call_soon` in one frame: every task wake-up comes through here."""
        if self._closed or self._debug:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def close(self) -> None:
        self._timers.clear()
        super().close()

    def advance_to_next_timer(self) -> None:
        if self._timers:
            self._vtime = max(self._vtime, self._timers[0][0])

    def jump(self, idle: bool) -> list[tuple[selectors.SelectorKey, int]]:
        """Nothing is runnable: advance virtual time to the next timer, and poll the real fds
        only every POLL_EVERY advances (the syscall was ~10 % of a run; all the self-pipe
        can bring, a signal handler's callback, waits at most that many timer jumps,
        microseconds of wall time). `idle`: no timer is pending either."""
        self._skipped += 1
        if idle or self._skipped >= POLL_EVERY:
            self._skipped = 0
            events = self._vselector.poll()
            if events:
                return events
        if idle:
            raise SimulationDeadlockError(
                "no runnable task and no pending timer: the emulated cluster is stuck "
                "(a resource waits for capacity that is never released)"
            )
        self.advance_to_next_timer()
        return []

    def _run_once(self) -> None:
        """`BaseEventLoop._run_once` on virtual time: the same steps in the same order.

        Why not the stock one: a turn is ~19 iterations, and it spends most of its own time
        on calls that do nothing here (a `select(0)` that returns [], processing no events,
        two `time()` calls). Kept from it: the cleanup of cancelled timers (the heap is
        rebuilt once over half of 100+ timers are cancelled), the 1 ns clock-resolution
        window for due timers, and running only what was ready when the iteration began.
        Dropped: debug mode's slow-callback warning (a callback takes no virtual time).
        """
        timers = self._timers
        count = len(timers)
        if count > _COMPACT_AT and self._timer_cancelled_count / count > _COMPACT_FRACTION:
            timers = self._compact()
        else:
            while timers and timers[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(timers)[1]._scheduled = False  # type: ignore[attr-defined]
        ready: deque[asyncio.Handle] = self._ready  # type: ignore[attr-defined]
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not timers:
                self._process_events(self.jump(idle=True))  # type: ignore[attr-defined]
            elif timers[0][0] > self._vtime:
                self._process_events(self.jump(idle=False))  # type: ignore[attr-defined]
        end_time = self._vtime + self._clock_resolution  # type: ignore[attr-defined]
        while timers and timers[0][0] < end_time:
            handle = heapq.heappop(timers)[1]
            handle._scheduled = False  # type: ignore[attr-defined]
            ready.append(handle)
        for _ in range(len(ready)):
            todo = ready.popleft()
            if todo._cancelled:
                continue
            try:  # `Handle._run`, inlined: one Python frame less per callback
                todo._context.run(todo._callback, *todo._args)  # type: ignore[attr-defined]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                _callback_failed(todo, exc)

    def _compact(self) -> list[tuple[float, asyncio.TimerHandle]]:
        """Drop cancelled timers and re-heapify, as the stock iteration does."""
        live = []
        for entry in self._timers:
            if entry[1]._cancelled:
                entry[1]._scheduled = False  # type: ignore[attr-defined]
            else:
                live.append(entry)
        heapq.heapify(live)
        self._timers = live
        self._timer_cancelled_count = 0
        return live


def _callback_failed(handle: asyncio.Handle, exc: BaseException) -> None:
    """What `Handle._run` does when its callback raises: hand it to the loop's handler."""
    where = format_helpers._format_callback_source(handle._callback, handle._args)  # type: ignore[attr-defined]
    context: dict[str, Any] = {
        "message": f"Exception in callback {where}",
        "exception": exc,
        "handle": handle,
    }
    if handle._source_traceback:  # type: ignore[attr-defined]
        context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
    handle._loop.call_exception_handler(context)  # type: ignore[attr-defined]


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
