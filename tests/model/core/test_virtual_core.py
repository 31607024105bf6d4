"""model/core/virtual_core.py: events run by time, ties in the order scheduled, cancelled
timers never run (also after the heap is compacted), the alarm slot runs exactly where its
timer would, a run with nothing left to do before `stop()` is a deadlock, and coroutines are
refused with a clear error."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest

from dualpath.model.core.virtual_core import (
    CoreTimer,
    SimulationDeadlockError,
    Timing,
    VirtualCore,
    timing_of,
)


def test_events_run_by_time_and_ties_in_the_order_scheduled() -> None:
    core = VirtualCore()
    seen: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        seen.append((name, core.now()))

    core.call_at(2.0, lambda: mark("b"))
    core.call_at(1.0, lambda: mark("a"))
    core.call_at(2.0, lambda: mark("c"))
    core.call_at(3.0, core.stop)
    core.call_soon(lambda: mark("now"))
    core.run()
    assert seen == [("now", 0.0), ("a", 1.0), ("b", 2.0), ("c", 2.0)]
    assert core.now() == 3.0


def test_a_time_already_passed_runs_now_after_what_is_ready() -> None:
    core = VirtualCore()
    seen: list[tuple[str, float]] = []

    def at_one() -> None:
        core.call_soon(lambda: seen.append(("soon", core.now())))
        core.call_at(0.5, lambda: seen.append(("past", core.now())))
        core.call_at(1.0, lambda: seen.append(("same", core.now())))
        core.call_at(1.5, core.stop)

    core.call_at(1.0, at_one)
    core.run()
    assert seen == [("soon", 1.0), ("past", 1.0), ("same", 1.0)]


def _core(compiled_heap: bool) -> VirtualCore:
    """A core with the heap a compiled build keeps (timers by their fields) or the one pure
    Python keeps (`heapq` on tuples); the run picks by what it is, a test may pick either."""
    core = VirtualCore()
    core._native = compiled_heap
    return core


@pytest.mark.parametrize("compiled_heap", [False, True])
def test_cancelled_timers_never_run_also_after_compaction(compiled_heap: bool) -> None:
    """Random timers, most of them cancelled (as the fabric re-arms): the survivors run in
    time order, each exactly once, whatever the compaction did."""
    rng = random.Random(7)
    core = _core(compiled_heap)
    ran: list[float] = []
    kept: list[float] = []
    for _ in range(5000):
        when = rng.uniform(0.0, 100.0)
        timer = core.call_at(when, lambda w=when: ran.append(w))
        if rng.random() < 0.8:
            timer.cancel()
            timer.cancel()  # twice is once
        else:
            kept.append(when)
    core.call_at(101.0, core.stop)
    core.run()
    assert ran == sorted(kept)
    assert core._cancelled == 0


def _rearming_run(
    use_alarm: bool, seed: int, compiled_heap: bool = False
) -> list[tuple[str, float]]:
    """A client that keeps re-arming one timer (as the fabric does) among other timers at
    the same and nearby times, through the alarm or through call_at and cancel."""
    rng = random.Random(seed)
    core = _core(compiled_heap)
    seen: list[tuple[str, float]] = []
    armed: list[object] = []

    def rearm(k: int) -> None:
        seen.append((f"alarm{k}", core.now()))
        if k >= 300:
            return
        for j in range(rng.randint(0, 3)):  # others, some at the alarm's next time
            when = core.now() + rng.choice((0.5, 1.0, rng.uniform(0.1, 2.0)))
            core.call_at(when, lambda n=f"t{k}.{j}": seen.append((n, core.now())))
        nxt = core.now() + rng.choice((0.5, 1.0, rng.uniform(0.1, 2.0)))
        if rng.random() < 0.3:  # re-armed twice: the first one is replaced
            arm(nxt + 1.0, lambda: seen.append(("never", core.now())))
        arm(nxt, lambda: rearm(k + 1))

    def arm(when: float, callback: Callable[[], None]) -> None:
        if use_alarm:
            core.set_alarm(when, callback)
        else:
            if armed:
                armed.pop().cancel()  # type: ignore[attr-defined]
            armed.append(core.call_at(when, callback))

    core.call_at(0.5, lambda: rearm(0))
    core.call_at(1.0, lambda: seen.append(("first", core.now())))
    with pytest.raises(SimulationDeadlockError):
        core.run()
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_alarm_runs_exactly_where_its_heap_timer_would(seed: int) -> None:
    via_alarm = _rearming_run(True, seed)
    assert via_alarm == _rearming_run(False, seed)
    assert ("alarm300", via_alarm[-1][1]) in via_alarm and ("never", 0.0) not in via_alarm
    assert not any(name == "never" for name, _ in via_alarm)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_heaps_run_the_same_events_in_the_same_order(seed: int) -> None:
    """The compiled build's heap of timers and pure Python's heap of tuples: the same
    order, ties and the alarm included (the reports of the two builds rest on it)."""
    for use_alarm in (True, False):
        tuples = _rearming_run(use_alarm, seed, compiled_heap=False)
        assert _rearming_run(use_alarm, seed, compiled_heap=True) == tuples
    # many timers at few distinct times: order within a time is scheduling order
    runs = []
    for compiled_heap in (False, True):
        rng = random.Random(seed)
        core = _core(compiled_heap)
        seen: list[int] = []
        for k in range(3000):
            when = rng.choice((1.0, 2.0, 2.0, 3.5))
            timer = core.call_at(when, lambda k=k, seen=seen: seen.append(k))
            if rng.random() < 0.1:
                timer.cancel()
        core.call_at(10.0, core.stop)
        core.run()
        runs.append(seen)
    assert runs[0] == runs[1] and len(runs[0]) > 2000


def test_the_alarm_slot_has_one_owner_and_only_times_ahead() -> None:
    core = VirtualCore()
    a, b = object(), object()
    assert core.claim_alarm(a) and core.claim_alarm(a) and not core.claim_alarm(b)
    core.call_at(1.0, lambda: None)
    core.set_alarm(2.0, core.stop)
    core.run()
    assert core.now() == 2.0 and core.events == 2
    with pytest.raises(ValueError, match="not ahead"):
        core.set_alarm(2.0, lambda: None)
    core.set_alarm(3.0, lambda: None)
    core.clear_alarm()
    with pytest.raises(SimulationDeadlockError):
        core.run()  # a cleared alarm is no event


def test_cancelling_a_timer_after_it_ran_changes_nothing() -> None:
    """Many clients cancel a timer they no longer need without asking whether it ran."""
    core = VirtualCore()
    spent = [core.call_at(0.001 * k, lambda: None) for k in range(1, 1000)]
    core.call_at(1.0, core.stop)
    core.run()
    for timer in spent:
        timer.cancel()
    assert core._cancelled == 0
    core.call_at(2.0, core.stop)
    core.run()
    assert core.now() == 2.0


def test_nothing_left_before_stop_is_a_deadlock() -> None:
    core = VirtualCore()
    core.call_at(1.0, lambda: None)
    with pytest.raises(SimulationDeadlockError, match="stuck"):
        core.run()


def test_a_failing_callback_ends_the_run_with_its_error() -> None:
    core = VirtualCore()

    def boom() -> None:
        raise KeyError("boom")

    core.call_at(1.0, boom)
    with pytest.raises(KeyError, match="boom"):
        core.run()


def test_coroutines_are_refused_with_a_clear_error() -> None:
    core = VirtualCore()
    with pytest.raises(RuntimeError, match="runs callbacks, not coroutines"):
        core.create_future()
    with pytest.raises(RuntimeError, match="call_at"):
        asyncio.run(core.sleep(1.0))


def test_timing_calls_the_core_or_any_other_clock() -> None:
    """`Timing` (what compiled engines call) gives the clock's own now and call_at, on the
    virtual core and on a clock it does not know; in pure Python `timing_of` is the clock."""
    core = VirtualCore()
    assert timing_of(core) is core  # pure Python: no wrapper
    fired: list[float] = []
    for timing in (Timing(core), Timing(_Delegating(core))):
        timing.call_at(2.5, lambda: fired.append(core.now()))
        assert timing.now() == core.now()
    core.call_at(3.0, core.stop)
    core.run()
    assert fired == [2.5, 2.5]


class _Delegating:
    """A clock that is not the core (as the process runtime's are): Timing must call it."""

    def __init__(self, core: VirtualCore) -> None:
        self.core = core

    def now(self) -> float:
        return self.core.now()

    def call_at(self, when: float, callback: Callable[[], None]) -> CoreTimer:
        return self.core.call_at(when, callback)
