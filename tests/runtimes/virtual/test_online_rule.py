"""The online stop rule (paper §7.4) and the window block of the report, on synthetic turns."""

from __future__ import annotations

import pytest

from dualpath.model.entities.metrics import RequestRecord
from dualpath.report.online import (
    MAX_DURATION,
    STEADY_STATE,
    TTFT_SLO_EXCEEDED,
    StopRule,
    Window,
    decide,
    online_section,
)

RULE = StopRule(window_s=10.0, lookback_s=30.0, tolerance=0.05, max_duration_s=100.0)


def _rec(t_done: float, ttft: float, gen: int = 12, tpot: float = 0.02) -> RequestRecord:
    arrival = t_done - ttft - tpot * (gen - 1)
    first = arrival + ttft
    return RequestRecord(0, 0, 100, 90, gen, "pe", arrival, first, first + tpot, t_done)


def _window(ttft_at: dict[int, float]) -> Window:
    w = Window()
    for t, v in ttft_at.items():
        w.add(_rec(t + 0.5, v))
    return w


def test_window_mean_counts_turns_by_finish_second() -> None:
    w = _window({0: 1.0, 1: 3.0, 5: 5.0})
    assert w.mean_ttft(0, 2) == pytest.approx(2.0)
    assert w.mean_ttft(0, 6) == pytest.approx(3.0)
    assert w.mean_ttft(2, 5) is None  # no turn finished in [2, 5)


def test_keeps_running_before_a_full_window() -> None:
    assert decide(RULE, _window({1: 9.0}), now=5.0) is None


def test_stops_when_the_window_mean_ttft_exceeds_the_slo() -> None:
    w = _window({t: (3.0 if t < 12 else 5.0) for t in range(20)})
    assert decide(RULE, w, now=12.0) is None  # window [2, 12): mean 3 s
    assert decide(RULE, w, now=20.0) == TTFT_SLO_EXCEEDED  # window [10, 20): mean 4.6 s
    at_slo = _window({t: (3.0 if t < 15 else 5.0) for t in range(20)})
    assert decide(RULE, at_slo, now=20.0) is None  # mean exactly 4 s: not above the SLO


def test_one_slow_turn_does_not_stop_the_run() -> None:
    w = _window({t: 0.5 for t in range(20)})
    w.add(_rec(19.5, 30.0))
    assert decide(RULE, w, now=20.0) is None


def test_steady_when_the_window_matches_the_one_lookback_earlier() -> None:
    ramp = {t: 0.2 + 0.02 * t for t in range(30)} | {t: 1.0 for t in range(30, 60)}
    w = _window(ramp)
    assert decide(RULE, w, now=40.0) is None  # [30,40) = 1.0 vs [0,10) = 0.29: not steady
    ramp2 = {t: 1.0 + 0.001 * (t % 3) for t in range(60)}
    assert decide(RULE, _window(ramp2), now=40.0) == STEADY_STATE


def test_tolerance_is_relative_to_the_earlier_window() -> None:
    at = {t: 1.0 for t in range(10)} | {t: 1.06 for t in range(30, 40)}
    assert decide(RULE, _window(at), now=40.0) is None  # 6 % off
    at = {t: 1.0 for t in range(10)} | {t: 1.04 for t in range(30, 40)}
    assert decide(RULE, _window(at), now=40.0) == STEADY_STATE


def test_max_duration_ends_an_unsteady_run() -> None:
    w = _window({t: 0.1 * (1 + t % 2) * (1 + t / 10) for t in range(101)})
    assert decide(RULE, w, now=100.0) == MAX_DURATION


def test_online_section_verdicts() -> None:
    recs = [_rec(t + 0.5, 1.0, tpot=0.03) for t in range(50)]
    ok = online_section(RULE, recs, aps=0.2, stop_time=50.0, reason=STEADY_STATE,
                        agents_arrived=5, agents_finished=5)  # fmt: skip
    assert ok["slo_met"] and ok["window"]["ttft_s"]["n"] == 10
    assert ok["window"]["tpot_s"]["mean"] == pytest.approx(0.03)
    slow = [_rec(t + 0.5, 1.0, tpot=0.06) for t in range(50)]
    bad = online_section(RULE, slow, aps=0.2, stop_time=50.0, reason=STEADY_STATE,
                         agents_arrived=5, agents_finished=5)  # fmt: skip
    assert not bad["slo_met"]  # TPOT 60 ms > 50 ms
    over = online_section(RULE, recs, aps=0.2, stop_time=50.0, reason=TTFT_SLO_EXCEEDED,
                          agents_arrived=5, agents_finished=5)  # fmt: skip
    assert not over["slo_met"]
    empty = online_section(RULE, [], aps=0.2, stop_time=50.0, reason=MAX_DURATION,
                           agents_arrived=0, agents_finished=0)  # fmt: skip
    assert not empty["slo_met"]
