"""The equivalence gate's verdicts, from report JSONs alone (pure: no I/O, no runs).

A metric of a scenario passes when the mean over the seeds on the new tree is within
`TOLERANCE` (±1 %) of the old tree's mean *and* the two means differ by no more than the
seeds' own spread: the larger of the two trees' sample standard deviations over the seeds
(with one seed there is no spread to compare with, so only the ±1 % holds). A scenario's
runs also need clean integrity counters on both trees: no block lost or corrupted, the
storage bytes read equal to the bytes that reached prefill HBM (`conservation_ok`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TOLERANCE = 0.01  # issue 26: the means within ±1 % of the old commit's
# metric -> where it sits in a report (a run's JCT is one number; the latencies' per-turn mean)
METRICS: dict[str, tuple[str, ...]] = {
    "jct_s": ("jct_s",),
    "ttft_s": ("latency", "ttft_s", "mean"),
    "ttst_s": ("latency", "ttst_s", "mean"),
    "tpot_s": ("latency", "tpot_s", "mean"),
}


def metric(report: Mapping[str, Any], name: str) -> float:
    """One metric of one report (`METRICS` says where)."""
    node: Any = report
    for key in METRICS[name]:
        node = node[key]
    return float(node)


def integrity_problems(report: Mapping[str, Any]) -> list[str]:
    """What is wrong with a report's integrity counters (empty: clean)."""
    i = report["integrity"]
    out = []
    if i["blocks_lost"]:
        out.append(f"{i['blocks_lost']} blocks lost")
    if i["blocks_corrupted"]:
        out.append(f"{i['blocks_corrupted']} blocks corrupted")
    if not i.get("conservation_ok", True):
        out.append("bytes read from storage != bytes into prefill HBM")
    return out


@dataclass(frozen=True, slots=True)
class Row:
    """One metric of one scenario, old tree against new."""

    scenario: str
    metric: str
    seeds: int
    old_mean: float
    new_mean: float
    diff_pct: float  # (new - old) / old, in %
    spread: float | None  # the seeds' own spread (None: one seed)
    ok: bool
    why: str  # empty when ok

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spread(old: Sequence[float], new: Sequence[float]) -> float | None:
    """The seeds' own spread: the larger sample standard deviation of the two trees."""
    if min(len(old), len(new)) < 2:
        return None
    return max(statistics.stdev(old), statistics.stdev(new))


def diff_pct(old_mean: float, new_mean: float) -> float:
    """(new - old) / old in %; 0 when both are 0, infinite when only the old one is."""
    if old_mean == new_mean:
        return 0.0
    if old_mean == 0:
        return math.inf
    return 100.0 * (new_mean - old_mean) / abs(old_mean)


def compare(
    scenario: str, name: str, old: Sequence[float], new: Sequence[float], tol: float = TOLERANCE
) -> Row:
    """The verdict on one metric: `old` and `new` are its values, one per seed."""
    if not old or len(old) != len(new):
        raise ValueError(f"{scenario} {name}: {len(old)} old and {len(new)} new seeds")
    old_mean, new_mean = statistics.fmean(old), statistics.fmean(new)
    d = diff_pct(old_mean, new_mean)
    s = spread(old, new)
    why = []
    if abs(d) > 100.0 * tol:
        why.append(f"|diff| {abs(d):.3g} % > {100.0 * tol:g} %")
    if s is not None and abs(new_mean - old_mean) > s:
        why.append(f"|new - old| {abs(new_mean - old_mean):.4g} > spread {s:.4g}")
    return Row(scenario, name, len(old), old_mean, new_mean, d, s, not why, "; ".join(why))


def compare_reports(
    scenario: str,
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    tol: float = TOLERANCE,
) -> list[Row]:
    """Every metric of one scenario (reports in the same seed order on both trees), then an
    `integrity` row that fails when any run on either tree lost or corrupted a block."""
    rows = [
        compare(scenario, m, [metric(r, m) for r in old], [metric(r, m) for r in new], tol)
        for m in METRICS
    ]
    problems = [
        f"{side} seed #{i + 1}: {p}"
        for side, reports in (("old", old), ("new", new))
        for i, r in enumerate(reports)
        for p in integrity_problems(r)
    ]
    lost = [
        float(sum(r["integrity"]["blocks_lost"] + r["integrity"]["blocks_corrupted"] for r in side))
        for side in (old, new)
    ]
    rows.append(
        Row(scenario, "integrity", len(old), lost[0], lost[1], 0.0, None, not problems,
            "; ".join(problems))
    )  # fmt: skip
    return rows


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "inf"
    return f"{x:.6g}"


def markdown(rows: Sequence[Row]) -> str:
    """The gate's table (scenario, metric, old mean, new mean, diff %, seeds' spread, verdict)."""
    lines = [
        "| scenario | metric | seeds | old mean | new mean | diff % | seeds' spread | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = "ok" if r.ok else f"**FAIL**: {r.why}"
        diff = "" if r.metric == "integrity" else f"{r.diff_pct:+.3f}"
        lines.append(
            f"| {r.scenario} | {r.metric} | {r.seeds} | {_num(r.old_mean)} | "
            f"{_num(r.new_mean)} | {diff} | {_num(r.spread)} | {verdict} |"
        )
    return "\n".join(lines)


def passed(rows: Sequence[Row]) -> bool:
    return bool(rows) and all(r.ok for r in rows)
