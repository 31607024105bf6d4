"""Online serving measurements (paper §7.4): sliding-window latency and the stop rule.

Pure: fed with finished turns, asked at emulated times whether the run may stop.

Readings of the paper's wording (it gives no formula), stated once here:
- a turn is counted in the window where it *finished* (its TTFT and TPOT are both known);
- "TTFT exceeds 4 s" = the mean TTFT of the last `window_s` exceeds the SLO (a single
  slow turn is not overload);
- "TTFT variation over a 150 s sliding window differs by less than 5 % from the same
  measure 30 minutes earlier" = |mean TTFT of the last window − mean TTFT of the window
  ending `lookback_s` earlier| ≤ tolerance × the earlier one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dualpath.model.entities.metrics import RequestRecord

TTFT_SLO_EXCEEDED = "ttft_slo_exceeded"
STEADY_STATE = "steady_state"
MAX_DURATION = "max_duration"


@dataclass(frozen=True, slots=True)
class StopRule:
    slo_ttft_s: float = 4.0
    slo_tpot_s: float = 0.050
    window_s: float = 150.0
    lookback_s: float = 1800.0
    tolerance: float = 0.05
    max_duration_s: float = 7200.0


def ttft(r: RequestRecord) -> float:
    return r.t_first - r.arrival


def ttst(r: RequestRecord) -> float | None:
    return r.t_second - r.t_first if r.gen >= 2 else None


def tpot(r: RequestRecord) -> float | None:
    return (r.t_last - r.t_second) / (r.gen - 2) if r.gen >= 3 else None


class Window:
    """Per-second sums of finished turns' TTFT, so any window mean costs O(window)."""

    def __init__(self) -> None:
        self._sum: list[float] = []
        self._n: list[int] = []

    def add(self, record: RequestRecord) -> None:
        b = int(record.t_last)
        if b >= len(self._n):
            grow = b + 1 - len(self._n)
            self._sum.extend([0.0] * grow)
            self._n.extend([0] * grow)
        self._sum[b] += ttft(record)
        self._n[b] += 1

    def mean_ttft(self, t0: float, t1: float) -> float | None:
        """Mean TTFT of turns that finished in [t0, t1) (whole seconds)."""
        lo, hi = max(0, math.floor(t0)), min(len(self._n), math.floor(t1))
        n = sum(self._n[lo:hi])
        return sum(self._sum[lo:hi]) / n if n else None


def decide(rule: StopRule, window: Window, now: float) -> str | None:
    """The paper's stop rule at emulated time `now` (None = keep running)."""
    if now >= rule.window_s:
        current = window.mean_ttft(now - rule.window_s, now)
        if current is not None and current > rule.slo_ttft_s:
            return TTFT_SLO_EXCEEDED
        if now >= rule.lookback_s + rule.window_s and current is not None:
            then = rule.lookback_s
            earlier = window.mean_ttft(now - then - rule.window_s, now - then)
            if earlier and abs(current - earlier) <= rule.tolerance * earlier:
                return STEADY_STATE
    if now >= rule.max_duration_s:
        return MAX_DURATION
    return None


def _stats(values: Iterable[float | None]) -> dict[str, float | int]:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"mean": 0.0, "min": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0, "n": 0}

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return {
        "mean": sum(xs) / len(xs),
        "min": xs[0],
        "p50": q(0.5),
        "p90": q(0.9),
        "max": xs[-1],
        "n": len(xs),
    }


def online_section(
    rule: StopRule,
    records: Collection[RequestRecord],
    *,
    aps: float,
    stop_time: float,
    reason: str,
    agents_arrived: int,
    agents_finished: int,
    trajectory_jct: Sequence[float] = (),
    turns_per_trajectory: float = 0.0,
    think_per_trajectory_s: float = 0.0,
) -> dict[str, Any]:
    """The report's `online` block: the last window's latencies, the SLO verdict, the JCT
    of the trajectories that ran to their last turn (paper Fig. 11's metric), and that JCT
    rebuilt from turns: `turns_per_trajectory` (mean over the agents that arrived) × the
    last window's mean turn time, plus their mean think time (0 in the paper's setting).
    The completed ones lean to short trajectories (a long one that arrived late is cut at
    the stop); the rebuilt one does not, since a trajectory lasts its turns and thinks."""
    last = [r for r in records if stop_time - rule.window_s <= r.t_last < stop_time]
    window = {
        "ttft_s": _stats(ttft(r) for r in last),
        "ttst_s": _stats(ttst(r) for r in last),
        "tpot_s": _stats(tpot(r) for r in last),
        "turn_s": _stats(r.t_last - r.arrival for r in last),
    }
    turn_mean = window["turn_s"]["mean"]
    from_turns = None
    if last and turns_per_trajectory:
        from_turns = turns_per_trajectory * turn_mean + think_per_trajectory_s
    ttft_mean, tpot_mean = window["ttft_s"]["mean"], window["tpot_s"]["mean"]
    met = (
        reason != TTFT_SLO_EXCEEDED
        and bool(last)
        and ttft_mean <= rule.slo_ttft_s
        and tpot_mean <= rule.slo_tpot_s
    )
    return {
        "aps": aps,
        "stop_time_s": stop_time,
        "stop_reason": reason,
        "steady": reason == STEADY_STATE,
        "slo": {"ttft_s": rule.slo_ttft_s, "tpot_s": rule.slo_tpot_s},
        "slo_met": met,
        "window_s": rule.window_s,
        "lookback_s": rule.lookback_s,
        "window": window,
        "agents_arrived": agents_arrived,
        "agents_finished": agents_finished,
        "trajectories_completed": len(trajectory_jct),
        "trajectory_jct_s": _stats(trajectory_jct),
        "turns_per_trajectory": turns_per_trajectory,
        "trajectory_jct_from_turns_s": from_turns,
    }
