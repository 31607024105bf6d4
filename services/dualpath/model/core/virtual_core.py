"""The virtual-time event core: a timer heap and a ready queue, no asyncio.

`dualpath sim` runs on it. The engines, the scheduler's fetches, the fabric and the
virtual runtime's agents are state machines that advance by callbacks at scheduled times
(docs/clock.md), so the core only has to pop the next event, move time to it and call it.
It is the model's `Clock` (now, call_at): coroutines (`sleep`, futures, tasks) do not run
on it; code that needs them runs on `VirtualTimeLoop` (model/core/virtual_loop.py).

Order: events run by time; at one instant, what was made ready (`call_soon`, or `call_at`
for a time already reached) runs before a timer that comes due, and each in the order it
was scheduled. A run is deterministic for a seed. Compiled with the fabric (native/).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from heapq import heapify, heappop, heappush
from types import FunctionType
from typing import Any, Final, cast

from dualpath.model.core.clock import Clock, TimerHandle
from dualpath.model.core.virtual_loop import SimulationDeadlockError

__all__ = ["CoreTimer", "SimulationDeadlockError", "Timing", "VirtualCore", "native", "timing_of"]

# Drop cancelled timers from the heap once they are this many and over half of it (the
# fabric cancels and re-arms its timer often; most cancelled entries lie far ahead).
_COMPACT_AT: Final = 256
INF: Final = math.inf


class CoreTimer:
    """A scheduled callback; `cancel()` before it runs and it never does."""

    __slots__ = ("_core", "callback", "cancelled", "seq", "when")

    def __init__(
        self, core: VirtualCore, when: float, callback: Callable[[], None], seq: int = 0
    ) -> None:
        self._core = core
        self.when = when
        self.seq = seq  # scheduling order: equal times run first in, first out
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._core._cancelled += 1


class VirtualCore:
    """Virtual time that jumps to the next event; the `Clock` of the one-process runtime."""

    def __init__(self) -> None:
        self._now = 0.0
        self._seq = 0  # insertion order: equal times fire first in, first out
        # Pure Python: `heapq` on (when, seq, timer) tuples. Compiled: the timers themselves,
        # by their (when, seq) fields (`_push` / `_pop`): heapq compared each pair of tuples
        # by generic rich comparison and made a tuple a timer, about 3 % of a compiled
        # 48P96D run; its C sift beats a Python one, so pure Python keeps it. (when, seq) is
        # a total order (seq is unique): both pop the same timers in the same order.
        self._native = native()
        self._heap: list[tuple[float, int, CoreTimer]] = []
        self._timers: list[CoreTimer] = []
        # FIFO read from `_head`: a deque's methods were generic calls in a compiled build.
        self._ready: list[CoreTimer] = []
        self._head = 0
        self._cancelled = 0  # cancelled timers still in the heap or the ready queue
        self._stopped = False
        self.events = 0  # callbacks run (for the bench)
        # The alarm (`set_alarm`): one timer outside the heap, at (when, seq) as if in it.
        self._alarm_t = INF
        self._alarm_seq = 0
        self._alarm_cb: Callable[[], None] | None = None
        self._alarm_owner: object | None = None

    # --- the Clock ----------------------------------------------------------------------
    @property
    def dilation(self) -> float:
        return 0.0

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> CoreTimer:
        """Run `callback` at emulated time `when` (now if that has passed)."""
        if when <= self._now:
            timer = CoreTimer(self, self._now, callback)
            self._ready.append(timer)
            return timer
        self._seq += 1
        timer = CoreTimer(self, when, callback, self._seq)
        if self._native:
            _push(self._timers, timer)
        else:
            heappush(self._heap, (when, self._seq, timer))
        return timer

    def claim_alarm(self, owner: object) -> bool:
        """Reserve the alarm slot for `owner` (True), unless another owner has it: a second
        fabric on one core keeps its timers in the heap."""
        if self._alarm_owner is None:
            self._alarm_owner = owner
        return self._alarm_owner is owner

    def set_alarm(self, when: float, callback: Callable[[], None]) -> None:
        """`call_at(when, callback)` for a time still ahead, in the core's one alarm slot
        instead of the heap: it replaces the alarm set before (as a cancel and a new
        `call_at` would) and runs in the same order a heap timer would, by (time, then
        scheduling order). The fabric keeps its next completion here: about 12 of a turn's
        16 timers, each a heap push and pop and a `CoreTimer` before (docs/clock.md)."""
        if when <= self._now:
            raise ValueError(f"set_alarm: {when} is not ahead of now ({self._now}); use call_at")
        self._seq += 1
        self._alarm_t, self._alarm_seq, self._alarm_cb = when, self._seq, callback

    def clear_alarm(self) -> None:
        """No alarm (as cancelling its timer would)."""
        self._alarm_t, self._alarm_cb = INF, None

    def call_soon(self, callback: Callable[[], None]) -> CoreTimer:
        timer = CoreTimer(self, self._now, callback)
        self._ready.append(timer)
        return timer

    async def sleep(self, dt: float) -> None:
        raise _no_coroutines("sleep")

    async def sleep_until(self, t: float) -> None:
        raise _no_coroutines("sleep_until")

    def create_future(self) -> Any:
        raise _no_coroutines("create_future")

    def create_task(self, coro: Coroutine[Any, Any, None]) -> Any:
        coro.close()
        raise _no_coroutines("create_task")

    # --- running ------------------------------------------------------------------------
    def stop(self) -> None:
        """End `run()` after the callback that is running now."""
        self._stopped = True

    def run(self) -> None:
        """Run events until `stop()`. No event left before that is a deadlock: something
        waits for what will never happen (a capacity never released); it raises."""
        self._stopped = False
        ready, heap, timers, native_heap = self._ready, self._heap, self._timers, self._native
        while not self._stopped:
            head = self._head
            if head < len(ready):
                timer = ready[head]
                if head + 1 == len(ready):  # drained: start over rather than grow
                    ready.clear()
                    self._head = 0
                else:
                    self._head = head + 1
            elif (len(timers) if native_heap else len(heap)) and not self._alarm_first():
                if self._cancelled > _COMPACT_AT and self._cancelled * 2 > self._queued():
                    self._compact()
                    continue
                timer = _pop(timers) if native_heap else heappop(heap)[2]
                if not timer.cancelled:
                    self._now = timer.when
            elif self._alarm_cb is not None:
                callback = self._alarm_cb
                self._now = self._alarm_t
                self.clear_alarm()
                self.events += 1
                callback()
                continue
            else:
                raise SimulationDeadlockError(
                    "no event is pending but the run has not ended: the emulated cluster "
                    "is stuck (a resource waits for capacity that is never released)"
                )
            if timer.cancelled:
                self._cancelled -= 1
                continue
            # Spent: a cancel() after it ran must not count a timer the heap no longer holds
            # (the count would only grow, and compaction would run at every pop, forever).
            timer.cancelled = True
            self.events += 1
            timer.callback()

    def _alarm_first(self) -> bool:
        """The alarm runs before the heap's first timer (an earlier time, or the same time
        and scheduled first)."""
        if self._native:
            top = self._timers[0]
            when, seq = top.when, top.seq
        else:
            entry = self._heap[0]
            when, seq = entry[0], entry[1]
        t = self._alarm_t
        return t < when or (t == when and self._alarm_seq < seq)

    def _queued(self) -> int:
        return len(self._timers) if self._native else len(self._heap)

    def _compact(self) -> None:
        if self._native:
            timers = self._timers
            kept = [timer for timer in timers if not timer.cancelled]
            self._cancelled -= len(timers) - len(kept)
            timers.clear()
            for timer in kept:
                _push(timers, timer)
            return
        live = []
        for entry in self._heap:
            if entry[2].cancelled:
                self._cancelled -= 1
            else:
                live.append(entry)
        heapify(live)
        self._heap[:] = live


def _earlier(a: CoreTimer, b: CoreTimer) -> bool:
    """a runs before b: an earlier time, or the same time and scheduled first."""
    return a.when < b.when or (a.when == b.when and a.seq < b.seq)


def _push(heap: list[CoreTimer], timer: CoreTimer) -> None:
    heap.append(timer)
    i = len(heap) - 1
    while i > 0:
        up = (i - 1) >> 1
        parent = heap[up]
        if not _earlier(timer, parent):
            break
        heap[i] = parent
        i = up
    heap[i] = timer


def _pop(heap: list[CoreTimer]) -> CoreTimer:
    """Remove and return the first timer of a non-empty heap."""
    last = heap.pop()
    n = len(heap)
    if not n:
        return last
    top = heap[0]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _earlier(heap[child + 1], heap[child]):
            child += 1
        low = heap[child]
        if not _earlier(low, last):
            break
        heap[i] = low
        i = child
    heap[i] = last
    return top


class Timing:
    """A `Clock`'s `now` and `call_at`, as native calls when the clock is the virtual core.

    Through the `Clock` protocol each is a generic Python method call in a compiled build
    (an attribute lookup, argument parsing); the engines and agents make a few dozen a turn.
    Any other clock (the process runtime's) is called as before."""

    __slots__ = ("_clock", "_core")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._core: VirtualCore | None = clock if isinstance(clock, VirtualCore) else None

    def now(self) -> float:
        core = self._core
        return core.now() if core is not None else self._clock.now()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        core = self._core
        return (
            core.call_at(when, callback)
            if core is not None
            else self._clock.call_at(when, callback)
        )


def native() -> bool:
    """True when the model runs as machine code (mypyc): a compiled function is a builtin."""
    return not isinstance(native, FunctionType)


def timing_of(clock: Clock) -> Timing:
    """What the engines call `now` and `call_at` on. Compiled, a `Timing` (native calls on
    the virtual core); in pure Python the clock itself, which has both methods: there the
    wrapper would only add a Python call to each."""
    return Timing(clock) if native() else cast(Timing, clock)


def _no_coroutines(what: str) -> RuntimeError:
    return RuntimeError(
        f"clock.{what}: the virtual core runs callbacks, not coroutines; schedule a "
        "callback with call_at, or run the coroutine on VirtualTimeLoop"
    )
