"""The virtual-time event loop: asyncio's loop, with time that jumps to the next timer.

`VirtualTimeLoop` runs the in-process runtime (`dualpath sim`, the experiments). Whenever
nothing is runnable its time advances to the earliest timer, so a cluster's hour passes in
seconds, deterministically for a seed. For speed it does a few of asyncio's steps itself,
each in the same order as asyncio (docs/clock.md); `VirtualClock` (model/core/clock.py) is the
model's view of it.
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
from asyncio import base_events, format_helpers
from collections import deque
from collections.abc import Callable
from contextvars import Context, copy_context
from typing import Any, TypeVarTuple


class SimulationDeadlockError(RuntimeError):
    """Every task waits and no timer is pending: the emulated cluster can never progress."""


POLL_EVERY = 256  # virtual-time advances per non-blocking poll of the real fds
# When the stock iteration compacts its heap of timers (it drops cancelled ones).
_COMPACT_AT = base_events._MIN_SCHEDULED_TIMER_HANDLES  # type: ignore[attr-defined]
_COMPACT_FRACTION = base_events._MIN_CANCELLED_TIMER_HANDLES_FRACTION  # type: ignore[attr-defined]
_Ts = TypeVarTuple("_Ts")


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
        # Polled only with a zero timeout (see `jump`): the loop never waits on it.
        self._vselector = selectors.DefaultSelector()
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
        else:
            timer = _new_timer(when, callback, args, self, context)
        heapq.heappush(self._timers, (when, timer))
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def call_soon(
        self, callback: Callable[[*_Ts], object], *args: *_Ts, context: Context | None = None
    ) -> asyncio.Handle:
        """`BaseEventLoop.call_soon` in one frame: every task wake-up comes through here."""
        if self._closed or self._debug:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        handle = _new_handle(callback, args, self, context)
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
            events = self._vselector.select(0)
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


# `Handle.__init__` and `TimerHandle.__init__` outside debug mode, field for field, in one
# frame: three Python calls less per timer (≈ 0.35 us of 0.6, 16 timers per turn). The
# objects are asyncio's own classes, so cancel(), comparisons and repr are unchanged.
_handle_new = asyncio.Handle.__new__
_timer_new = asyncio.TimerHandle.__new__


def _new_handle(
    callback: Callable[..., object],
    args: tuple[Any, ...],
    loop: VirtualTimeLoop,
    context: Context | None,
) -> asyncio.Handle:
    h = _handle_new(asyncio.Handle)
    h._context = copy_context() if context is None else context  # type: ignore[attr-defined]
    h._loop = loop  # type: ignore[attr-defined]
    h._callback = callback  # type: ignore[attr-defined]
    h._args = args
    h._cancelled = False
    h._repr = None  # type: ignore[attr-defined]
    h._source_traceback = None  # type: ignore[attr-defined]
    return h


def _new_timer(
    when: float,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    loop: VirtualTimeLoop,
    context: Context | None,
) -> asyncio.TimerHandle:
    t = _timer_new(asyncio.TimerHandle)
    t._context = copy_context() if context is None else context  # type: ignore[attr-defined]
    t._loop = loop  # type: ignore[attr-defined]
    t._callback = callback  # type: ignore[attr-defined]
    t._args = args
    t._cancelled = False
    t._repr = None  # type: ignore[attr-defined]
    t._source_traceback = None  # type: ignore[attr-defined]
    t._when = when  # type: ignore[attr-defined]
    t._scheduled = False  # type: ignore[attr-defined]
    return t


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
