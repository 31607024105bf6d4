"""model/core/virtual_core.py: events run by time, ties in the order scheduled, cancelled
timers never run (also after the heap is compacted), a run with nothing left to do before
`stop()` is a deadlock, and coroutines are refused with a clear error."""

from __future__ import annotations

import asyncio
import random

import pytest

from dualpath.model.core.virtual_core import SimulationDeadlockError, VirtualCore


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


def test_cancelled_timers_never_run_also_after_compaction() -> None:
    """Random timers, most of them cancelled (as the fabric re-arms): the survivors run in
    time order, each exactly once, whatever the compaction did."""
    rng = random.Random(7)
    core = VirtualCore()
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
