"""Table 3 / §7.6 — scale: 2P4D with 2K agents up to 48P96D with 48K agents (offline JCT), and
the online rows (2P4D at 0.4 APS, 44P88D at 8.8 APS: TTFT / TTST / TPOT).

The paper does not state these rows' MaxLen; its artefact names suggest 48K, which every run
here uses. Nor does it state the EP group sizes at scale: each side is split into groups of
the 2P4D unit's size (2 prefill nodes = EP16, 4 decode nodes = EP32), the "several small units"
the paper compares the large runs with. The intermediate points (4P8D ... 16P32D) keep the
agents-per-unit ratio, so a near-constant JCT is what linear scaling looks like.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, Row, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, topo
from dualpath.report.plots import write_timeline_png

NAME = "scale"
MAX_LEN = "48k"
POLICY = "dualpath"
UNIT_P, UNIT_D, UNIT_AGENTS = 2, 4, 2048  # the paper's 2P4D row: 2K agents
OFFLINE_UNITS = (1, 2, 4, 8, 24)  # 2P4D ... 48P96D
QUICK_UNITS = (1, 2)  # quick: 1P2D-sized units of 2 GPUs, a handful of agents
QUICK_AGENTS = 4
ONLINE: tuple[tuple[int, int, float], ...] = ((2, 4, 0.4), (44, 88, 8.8))
QUICK_ONLINE_ROWS: tuple[tuple[int, int, float], ...] = ((1, 2, 0.2), (2, 4, 0.4))
FULL_ONLINE = {"max_duration_s": 3600.0}
QUICK_ONLINE = {"window_s": 20.0, "lookback_s": 40.0, "max_duration_s": 90.0}


def _unit(quick: bool) -> tuple[int, int, int]:
    return (1, 2, QUICK_AGENTS) if quick else (UNIT_P, UNIT_D, UNIT_AGENTS)


def _groups(quick: bool) -> dict[str, int]:
    p, d, _ = _unit(quick)
    return {"prefill_group_nodes": p, "decode_group_nodes": d}


def _offline_key(quick: bool, units: int) -> str:
    p, d, a = _unit(quick)
    stem = f"offline-{topo(p * units, d * units).lower()}-a{a * units}"
    return f"quick-{stem}" if quick else stem


def _online_key(quick: bool, p: int, d: int, aps: float) -> str:
    stem = f"online-{topo(p, d).lower()}-aps{aps:g}"
    return f"quick-{stem}" if quick else stem


def _offline(quick: bool, units: int) -> RunSpec:
    p, d, a = _unit(quick)
    extra: dict[str, Any] = {"topology": _groups(quick)}
    sc = build(ARM_660B, quick, policy=POLICY, agents=a * units, max_len=MAX_LEN,
               prefill=p * units, decode=d * units, extra=extra)  # fmt: skip
    return RunSpec(_offline_key(quick, units), sc, labels(sc, units=units))


def _online(quick: bool, p: int, d: int, aps: float) -> RunSpec:
    online = {**(QUICK_ONLINE if quick else FULL_ONLINE), "aps": aps}
    unit_p, unit_d, _ = _unit(quick)
    extra: dict[str, Any] = {
        "workload": {"mode": "online"},
        "online": online,
        # Groups of the unit's size when the side divides into them (44P88D: 22 units).
        "topology": {"prefill_group_nodes": unit_p if p % unit_p == 0 else 0,
                     "decode_group_nodes": unit_d if d % unit_d == 0 else 0},
    }  # fmt: skip
    sc = build(ARM_660B, quick, policy=POLICY, agents=1, max_len=MAX_LEN,
               prefill=p, decode=d, extra=extra)  # fmt: skip
    tags = labels(sc, aps=aps)
    del tags["agents"]
    return RunSpec(_online_key(quick, p, d, aps), sc, tags)


def _online_rows(quick: bool) -> tuple[tuple[int, int, float], ...]:
    return QUICK_ONLINE_ROWS if quick else ONLINE


class Scale(Experiment):
    name = NAME
    title = "Table 3 / §7.6 — scale: 2P4D/2K agents to 48P96D/48K agents, 44P88D online"

    def plan(self, quick: bool) -> list[RunSpec]:
        units = QUICK_UNITS if quick else OFFLINE_UNITS
        specs = [_offline(quick, u) for u in units]
        return specs + [_online(quick, p, d, aps) for p, d, aps in _online_rows(quick)]

    def summarize(self, quick: bool, results: Results) -> Summary:
        units = QUICK_UNITS if quick else OFFLINE_UNITS
        first, last = _offline_key(quick, units[0]), _offline_key(quick, units[-1])
        rows: list[Row] = [
            paper_row(NAME, "jct_2p4d_2k", jct(results.get(first)), "ours, 48K", quick=quick),
            paper_row(NAME, "jct_48p96d_48k", jct(results.get(last)), "ours, 48K", quick=quick),
        ]
        big = _online_key(quick, *_online_rows(quick)[-1])
        for m in ("ttft", "ttst", "tpot"):
            value = num(results.get(big), f"online.window.{m}_s.mean")
            rows.append(paper_row(NAME, f"online_44p88d_{m}", value, "last-window mean",
                                  quick=quick))  # fmt: skip
        return Summary(
            rows=rows,
            tables=[self._offline_table(quick, results), self._online_table(quick, results)],
            plots=[
                Plot("scale.png", "JCT and emulation speed vs scale", _draw(quick, results)),
                *_fig15(quick, results),
            ],
            setup=self._setup(quick),
        )

    def _offline_table(self, quick: bool, results: Results) -> Table:
        units = QUICK_UNITS if quick else OFFLINE_UNITS
        base = jct(results.get(_offline_key(quick, units[0])))
        out = []
        p, d, a = _unit(quick)
        for u in units:
            r = results.get(_offline_key(quick, u))
            wall, turns = num(r, "runtime.wall_s"), num(r, "requests.completed")
            out.append([
                f"{topo(p * u, d * u)}, {a * u} agents", str(u), cell(r, jct(r)),
                fmt(div(jct(r), base), 3), fmt(turns, 0), fmt(wall, 0), fmt(div(turns, wall), 0),
                fmt(num(r, "runtime.emulated_per_wall"), 1),
            ])  # fmt: skip
        header = ["run", "units", "JCT (s)", "JCT / first", "turns", "wall (s)"]
        header += ["turns per wall s", "emulated s per wall s"]
        title = (
            f"offline DualPath, {max_len(quick, MAX_LEN)} (emulated seconds; wall on this machine)"
        )
        return Table(title, header, out)

    def _online_table(self, quick: bool, results: Results) -> Table:
        out = []
        for p, d, aps in _online_rows(quick):
            r = results.get(_online_key(quick, p, d, aps))
            w = "online.window."
            tpot = num(r, w + "tpot_s.mean")
            out.append([
                topo(p, d), f"{aps:g}", fmt(num(r, w + "ttft_s.mean"), 3),
                fmt(num(r, w + "ttst_s.mean"), 3), fmt(None if tpot is None else tpot * 1e3, 1),
                fmt(num(r, "runtime.wall_s"), 0),
            ])  # fmt: skip
        header = ["P/D", "APS", "TTFT (s)", "TTST (s)", "TPOT (ms)", "wall (s)"]
        return Table(f"online DualPath, {max_len(quick, MAX_LEN)}, last-window means", header, out)

    def _setup(self, quick: bool) -> list[str]:
        if quick:
            return [QUICK_SETUP, f"units {list(QUICK_UNITS)} of 1P2D with {QUICK_AGENTS} agents"]
        return [
            f"DS 660B, MaxLen {MAX_LEN} (not stated in the paper; its artefact names suggest it)",
            f"offline: {list(OFFLINE_UNITS)} units of 2P4D with 2,048 agents each, policy dualpath",
            "EP groups of the unit's size (prefill EP16, decode EP32) on every point",
            "online: 2P4D at 0.4 APS and 44P88D at 8.8 APS, the paper's stop rule (1 h cap)",
        ]


def _fig15(quick: bool, results: Results) -> list[Plot]:
    """Fig. 15 (prompt TPS, TTFT, running agents over time) of the largest offline run whose
    report has a timeline (reports cached before the section existed have none)."""
    units = QUICK_UNITS if quick else OFFLINE_UNITS
    for u in reversed(units):
        report = results.get(_offline_key(quick, u))
        if report is not None and pick(report, "timeline.windows"):
            p, d, _ = _unit(quick)
            draw = functools.partial(write_timeline_png, dict(report))
            caption = f"Fig. 15: {topo(p * u, d * u)} offline over time"
            return [Plot("scale-timeline.png", caption, draw)]
    return []


def _draw(quick: bool, results: Results) -> Any:
    units = QUICK_UNITS if quick else OFFLINE_UNITS

    def draw(path: Path) -> None:
        xs = [float(u) for u in units]
        reports = [results.get(_offline_key(quick, u)) for u in units]
        charts.line_panels(
            path,
            [
                charts.Panel("JCT", xs, {"dualpath": [jct(r) for r in reports]}),
                charts.Panel(
                    "emulation speed",
                    xs,
                    {
                        "emulated s per wall s": [
                            num(r, "runtime.emulated_per_wall") for r in reports
                        ]
                    },
                ),
            ],
            xlabel="units of 2P4D (2,048 agents each)" if not quick else "units",
            ylabel="emulated s / ratio",
            title="scale: offline DualPath, 48K",
        )

    return draw
