"""Fig. 10 / Table 3 — online serving: latency vs APS and the APS capacity under the SLO.

Each (model, policy) gets an APS grid, run with the paper's stop rule (docs/online.md);
the capacity is the largest APS whose run meets the SLO (TTFT ≤ 4 s, TPOT ≤ 50 ms, window
means), refined by bisection (geometric midpoints) between the last passing and the first
failing rate. Probes are keyed by their APS, so an interrupted search resumes from cache.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, Row, RunSpec, Summary, Table
from dualpath.experiments.extract import div, failed, fmt, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_27B, ARM_660B, QUICK_SETUP, Arm, build, labels

NAME = "online-capacity"
POLICIES = ("basic", "dualpath")
MAX_LEN = "64k"
# Grids bracket the paper's capacities (DS 660B DualPath serves 0.4 APS in Table 3).
# 0.25 is Fig. 12 (left)'s one labelled APS (its TTFT stages are read there).
GRIDS: dict[str, tuple[float, ...]] = {"ds660b": (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0),
                                       "ds27b": (0.1, 0.2, 0.4, 0.8, 1.6)}  # fmt: skip
QUICK_GRID = (0.05, 0.4, 1.6)
# Full runs keep the paper's window (150 s) and look-back (30 min); an unsteady run is cut
# at 1 h of emulated time and reported as such. Quick runs shrink all three.
FULL_ONLINE = {"max_duration_s": 3600.0}
# Quick: a TTFT SLO scaled to the tiny cluster's ~40 ms TTFT so that a short search still
# finds a bracket and bisects (the mechanics under test, not the paper's numbers).
QUICK_ONLINE = {"window_s": 20.0, "lookback_s": 40.0, "max_duration_s": 90.0, "slo_ttft_s": 0.06}
REFINE_STEPS = {True: 1, False: 2}
TOLERANCE = {True: 0.5, False: 0.1}  # stop bisecting when fail/pass <= 1 + this
TABLE3_APS = 0.4
FIG12_APS = 0.25  # Fig. 12 (left): Basic's scheduling share and DualPath's allocating share
# (policy, our stage, paper_figures key) compared at FIG12_APS
FIG12_ROWS = (("basic", "scheduling", "fig12_basic_scheduling"),
              ("dualpath", "allocating", "fig12_dualpath_allocating"))  # fmt: skip
STAGES = ("scheduling", "allocating", "reading", "prefill")  # the paper's four (Fig. 12 left)
RATIO_KEYS = {"ds660b": "capacity_ratio_660b", "ds27b": "capacity_ratio_27b"}
ARMS = (ARM_660B, ARM_27B)


def _key(arm: Arm, quick: bool, policy: str, aps: float) -> str:
    stem = f"{arm.slug}-{arm.topo(quick).lower()}-{policy}-aps{aps:.4f}"
    return f"quick-{stem}" if quick else stem


def _spec(arm: Arm, quick: bool, policy: str, aps: float) -> RunSpec:
    online = {**(QUICK_ONLINE if quick else FULL_ONLINE), "aps": aps}
    extra: dict[str, Any] = {"workload": {"mode": "online"}, "online": online}
    sc = build(arm, quick, policy=policy, agents=1, max_len=MAX_LEN, extra=extra)
    tags = labels(sc, aps=aps)
    del tags["agents"]  # online: agents arrive at `aps`; workload.agents is unused
    return RunSpec(_key(arm, quick, policy, aps), sc, tags)


def _grid(arm: Arm, quick: bool) -> tuple[float, ...]:
    return QUICK_GRID if quick else GRIDS[arm.slug]


def slo_met(report: dict[str, Any] | None) -> bool | None:
    """The probe's verdict under the SLO rule (the run's own `online.slo_met`, docs/online.md);
    None for a failed or unfinished run."""
    if failed(report):
        return None
    value = pick(report, "online.slo_met")
    return value if isinstance(value, bool) else None


def _probes(arm: Arm, quick: bool, policy: str, results: Results) -> dict[float, bool]:
    """APS -> SLO met, for every finished probe of this (arm, policy)."""
    return probes_under(_key(arm, quick, policy, 0.0).rsplit("aps", 1)[0] + "aps", results)


def probes_under(prefix: str, results: Results) -> dict[float, bool]:
    """APS -> SLO met, for every finished probe whose run key is `prefix` + its APS (runs
    that failed, with no verdict, are left out). The planner's probes are keyed the same way."""
    out: dict[float, bool] = {}
    for key, report in results.items():
        if key.startswith(prefix):
            met = slo_met(dict(report))
            if met is not None:
                out[float(key[len(prefix) :])] = met
    return out


def bracket(probes: dict[float, bool]) -> tuple[float | None, float | None]:
    """(largest passing APS below the first failing one, first failing APS)."""
    fails = [a for a, ok in probes.items() if not ok]
    first_fail = min(fails) if fails else None
    passes = [a for a, ok in probes.items() if ok and (first_fail is None or a < first_fail)]
    return (max(passes) if passes else None, first_fail)


def next_midpoint(lo: float | None, hi: float | None, tolerance: float) -> float | None:
    """The next bisection probe (geometric midpoint, 4 decimals) between the last passing
    and the first failing APS, or None when there is no bracket or fail/pass <= 1 + tolerance.
    The capacity planner (experiments/plan.py) bisects with the same rule."""
    if lo is None or hi is None or hi / lo <= 1 + tolerance:
        return None
    return round(math.sqrt(lo * hi), 4)


class OnlineCapacity(Experiment):
    name = NAME
    title = "Fig. 10 / Table 3 — online latency vs APS and APS capacity"

    def plan(self, quick: bool) -> list[RunSpec]:
        return [
            _spec(arm, quick, pol, aps)
            for arm in ARMS
            for pol in POLICIES
            for aps in _grid(arm, quick)
        ]

    def more(self, quick: bool, results: Results) -> list[RunSpec]:
        todo = []
        for arm in ARMS:
            for pol in POLICIES:
                probes = _probes(arm, quick, pol, results)
                extra = [a for a in probes if a not in _grid(arm, quick)]
                if len(extra) >= REFINE_STEPS[quick]:
                    continue
                mid = next_midpoint(*bracket(probes), TOLERANCE[quick])
                if mid is not None:
                    todo.append(_spec(arm, quick, pol, mid))
        return todo

    def summarize(self, quick: bool, results: Results) -> Summary:
        rows: list[Row] = []
        table: list[list[str]] = []
        capacity: list[list[str]] = []
        for arm in ARMS:
            caps = {p: bracket(_probes(arm, quick, p, results)) for p in POLICIES}
            for pol, (lo, hi) in caps.items():
                capacity.append(_capacity_cells(arm, quick, pol, lo, hi))
            ratio = div(caps["dualpath"][0], caps["basic"][0])
            note = f"{arm.name(quick)}; capacities are the last passing probe of each search"
            rows.append(paper_row(NAME, RATIO_KEYS[arm.slug], ratio, note, quick=quick))
            table += _table_rows(arm, quick, results)
        rows += _table3_rows(quick, results)
        rows += _fig12_rows(quick, results)
        header = ["model", "policy", "APS", "stop", "t (s)", "TTFT (s)", "TTST (s)",
                  "TPOT (ms)", "SLO", "trajectory JCT (s, Fig. 11)", "completed",
                  "from turns (s)"]  # fmt: skip
        setup = [QUICK_SETUP] if quick else [
            f"online, {MAX_LEN}, DS 660B 2P4D APS grid {GRIDS['ds660b']}, "
            f"DS 27B 1P1D APS grid {GRIDS['ds27b']}, policies {', '.join(POLICIES)}",
            "stop rule: TTFT window mean > 4 s, or steady (150 s window within 5 % of the one "
            "30 min earlier), or 1 h emulated; latencies are the last window's means",
        ]  # fmt: skip
        return Summary(
            rows=rows,
            tables=[
                Table(
                    "APS capacity (largest probe meeting the SLO)",
                    ["model", "policy", "capacity (APS)", "note"],
                    capacity,
                ),
                Table("Probes (last-window means)", header, table),
                Table(
                    f"Fig. 12 (left) — TTFT stages, {ARM_660B.name(quick)} (shares of the "
                    "run's mean TTFT, all turns; docs/report.md)",
                    ["policy", "APS", "TTFT (s)", *[f"{s} (%)" for s in STAGES]],
                    _stage_rows(quick, results),
                ),
            ],
            plots=[Plot("online.png", "TTFT / TTST / TPOT vs APS", _draw(quick, results))],
            setup=setup,
        )


def _capacity_cells(
    arm: Arm, quick: bool, pol: str, lo: float | None, hi: float | None
) -> list[str]:
    if lo is None:
        note = "no probe met the SLO" if hi is not None else "no finished probe"
    elif hi is None:
        note = "every probe met the SLO: capacity is at least this (extend the grid)"
    else:
        note = f"first failing probe {hi:g} APS"
    return [arm.name(quick), pol, fmt(lo, 4), note]


def _table_rows(arm: Arm, quick: bool, results: Results) -> list[list[str]]:
    out = []
    for pol in POLICIES:
        for aps in sorted(_probes(arm, quick, pol, results)):
            r = results[_key(arm, quick, pol, aps)]
            w = "online.window."
            tpot = num(r, w + "tpot_s.mean")
            out.append([
                arm.name(quick), pol, f"{aps:g}", str(pick(r, "online.stop_reason")),
                fmt(num(r, "online.stop_time_s"), 0), fmt(num(r, w + "ttft_s.mean"), 3),
                fmt(num(r, w + "ttst_s.mean"), 3), fmt(None if tpot is None else tpot * 1e3, 1),
                "met" if slo_met(dict(r)) else "missed",
                fmt(num(r, "online.trajectory_jct_s.mean") if pick(r, "online.trajectory_jct_s.n")
                    else None, 0),
                _completed(r),
                fmt(num(r, "online.trajectory_jct_from_turns_s"), 0),
            ])  # fmt: skip
    return out


def _completed(r: Any) -> str:
    """Trajectories that ran every turn, of those that arrived (Fig. 11 averages these)."""
    done, arrived = num(r, "online.trajectories_completed"), num(r, "online.agents_arrived")
    return "—" if done is None or arrived is None else f"{done:.0f} / {arrived:.0f}"


def _table3_rows(quick: bool, results: Results) -> list[Row]:
    aps = QUICK_GRID[1] if quick else TABLE3_APS
    r = results.get(_key(ARM_660B, quick, "dualpath", aps))
    note = f"{ARM_660B.name(quick)} DualPath at {aps:g} APS, last-window mean"
    return [
        paper_row(NAME, f"table3_{m}", num(r, f"online.window.{m}_s.mean"), note, quick=quick)
        for m in ("ttft", "ttst", "tpot")
    ]


def _stages(report: Any) -> dict[str, float | None]:
    """A probe's TTFT shares in the paper's four stages (report `bounds.ttft_stages`)."""
    share = pick(report, "bounds.ttft_stages.share")
    if not isinstance(share, dict):
        return dict.fromkeys(STAGES)
    return {k: share.get(k) if isinstance(share.get(k), int | float) else None for k in STAGES}


def _stage_rows(quick: bool, results: Results) -> list[list[str]]:
    out = []
    for pol in POLICIES:
        for aps in sorted(_probes(ARM_660B, quick, pol, results)):
            r = results[_key(ARM_660B, quick, pol, aps)]
            shares = _stages(r)
            out.append([
                pol, f"{aps:g}", fmt(num(r, "latency.ttft_s.mean"), 3),
                *[fmt(None if v is None else v * 100.0, 1) for v in shares.values()],
            ])  # fmt: skip
    return out


def _fig12_rows(quick: bool, results: Results) -> list[Row]:
    """Fig. 12 (left)'s two readings at APS 0.25, in % of the mean TTFT."""
    aps = QUICK_GRID[1] if quick else FIG12_APS
    rows = []
    for pol, stage, fig in FIG12_ROWS:
        r = results.get(_key(ARM_660B, quick, pol, aps))
        note = f"{ARM_660B.name(quick)} {pol} at {aps:g} APS, whole run"
        share = _stages(r)[stage] if r else None
        pct = None if share is None else share * 100.0
        rows.append(paper_row(NAME, fig, pct, note, quick=quick))
    return rows


def _draw(quick: bool, results: Results) -> Any:
    def draw(path: Path) -> None:
        panels = []
        for arm in ARMS:
            for metric, label in (("ttft", "TTFT"), ("ttst", "TTST"), ("tpot", "TPOT")):
                xs = sorted({a for p in POLICIES for a in _probes(arm, quick, p, results)})
                series = {
                    pol: [
                        num(results.get(_key(arm, quick, pol, a)), f"online.window.{metric}_s.mean")
                        for a in xs
                    ]
                    for pol in POLICIES
                }
                panels.append(charts.Panel(f"{arm.name(quick)} — {label}", xs, series))
        charts.line_panels(
            path, panels, xlabel="APS (agents/s)", ylabel="seconds (last-window mean)",
            title="Fig. 10 — online latency vs arrival rate",
        )  # fmt: skip

    return draw
