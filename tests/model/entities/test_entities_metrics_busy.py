"""Busy seconds kept in two places (per-batch adds and an engine's own `BusyClock`) read as
one figure per engine, in the report and in the process runtime's snapshot."""

from __future__ import annotations

from dualpath.model.entities.metrics import BusyClock, Metrics


def test_an_engine_is_busy_for_what_was_added_or_what_its_clock_kept() -> None:
    m = Metrics()
    m.add_busy("pe0", 0.25)
    m.add_busy("pe0", 0.5)
    clock = BusyClock()
    m.keep_busy("de0", clock)
    clock.busy_seconds += 1.5
    clock.busy_seconds += 0.125
    assert m.busy_of("pe0") == 0.75
    assert m.busy_of("de0") == 1.625
    assert m.busy_of("de1") == 0.0
    assert m.busy_totals() == {"pe0": 0.75, "de0": 1.625}


def test_both_sources_of_one_engine_add_up() -> None:
    """A merged run (the process runtime's aggregate) may add to an engine with a clock."""
    m = Metrics()
    clock = BusyClock()
    m.keep_busy("de0", clock)
    clock.busy_seconds = 2.0
    m.add_busy("de0", 1.0)
    assert m.busy_of("de0") == 3.0
    assert m.busy_totals() == {"de0": 3.0}


def test_a_later_clock_of_an_engine_takes_over_with_its_seconds() -> None:
    m = Metrics()
    first, second = BusyClock(), BusyClock()
    m.keep_busy("de0", first)
    first.busy_seconds += 0.75
    m.keep_busy("de0", second)
    second.busy_seconds += 0.5
    first.busy_seconds += 9.0  # (an engine no longer kept: not counted)
    assert m.busy_of("de0") == 1.25
    m.keep_busy("de0", second)  # again: nothing moves
    assert m.busy_of("de0") == 1.25
