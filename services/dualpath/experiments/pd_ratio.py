"""Fig. 8 — impact of the P/D ratio on offline JCT (DS 27B): 1P1D, 2P1D, 1P2D."""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, mean, vmax
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_27B, QUICK_SETUP, build, labels, run_key, topo

NAME = "pd-ratio"
POLICIES = ("basic", "dualpath")
TOPOLOGIES = ((1, 1), (2, 1), (1, 2))
AGENTS = (512, 1024, 2048)
MAX_LENS = ("32k", "48k", "64k")
QUICK_AGENTS = (4,)
# The paper's equal pairs (same usable storage bandwidth): (policy, P, D) / (policy, P, D).
EQUAL_PAIRS = {
    "basic_1p1d_over_basic_1p2d": (("basic", 1, 1), ("basic", 1, 2)),
    "dualpath_1p1d_over_basic_2p1d": (("dualpath", 1, 1), ("basic", 2, 1)),
    "dualpath_2p1d_over_dualpath_1p2d": (("dualpath", 2, 1), ("dualpath", 1, 2)),
}


def _points(quick: bool) -> list[tuple[str, int]]:
    return [(ml, a) for ml in (("32k",) if quick else MAX_LENS) for a in _agents(quick)]


def _agents(quick: bool) -> tuple[int, ...]:
    return QUICK_AGENTS if quick else AGENTS


def _key(quick: bool, pol: str, p: int, d: int, ml: str, a: int) -> str:
    return run_key("ds27b", topo(p, d), ml, f"a{a}", pol, quick=quick)


class PdRatio(Experiment):
    name = NAME
    title = "Fig. 8 — P/D ratio vs offline JCT (DS 27B)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for ml, a in _points(quick):
            for p, d in TOPOLOGIES:
                for pol in POLICIES:
                    sc = build(ARM_27B, quick, policy=pol, agents=a, max_len=ml, prefill=p,
                               decode=d)  # fmt: skip
                    specs.append(RunSpec(_key(quick, pol, p, d, ml, a), sc, labels(sc)))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        def get(pol: str, p: int, d: int, ml: str, a: int) -> float | None:
            return jct(results.get(_key(quick, pol, p, d, ml, a)))

        points = _points(quick)
        speedups = [
            div(get("basic", p, d, ml, a), get("dualpath", p, d, ml, a))
            for ml, a in points
            for p, d in TOPOLOGIES
        ]
        rows = [
            paper_row(NAME, "avg_speedup", mean(speedups), "mean of Basic/DualPath JCT",
                      quick=quick),
            paper_row(NAME, "max_speedup", vmax(speedups), quick=quick),
        ]  # fmt: skip
        for fig_key, (lhs, rhs) in EQUAL_PAIRS.items():
            ratios = [div(get(*lhs, ml, a), get(*rhs, ml, a)) for ml, a in points]
            rows.append(paper_row(NAME, fig_key, mean(ratios), quick=quick))
        header = ["MaxLen", "agents"]
        header += [f"{pol} {topo(p, d)} (s)" for pol in POLICIES for p, d in TOPOLOGIES]
        header += [f"speedup {topo(p, d)}" for p, d in TOPOLOGIES]
        table = []
        for ml, a in points:
            cells = [
                cell(results.get(_key(quick, pol, p, d, ml, a)), get(pol, p, d, ml, a))
                for pol in POLICIES
                for p, d in TOPOLOGIES
            ]
            sp = [
                fmt(div(get("basic", p, d, ml, a), get("dualpath", p, d, ml, a)))
                for p, d in TOPOLOGIES
            ]
            table.append([ml, str(a), *cells, *sp])
        groups = [f"{ml} · {a} agents" for ml, a in points]
        series = {
            f"{pol} {topo(p, d)}": [get(pol, p, d, ml, a) for ml, a in points]
            for pol in POLICIES
            for p, d in TOPOLOGIES
        }

        def draw(path: Path) -> None:
            charts.grouped_bars(
                path, groups, series, ylabel="JCT (emulated s)", title="Fig. 8 — P/D ratio (DS 27B)"
            )

        setup = [QUICK_SETUP] if quick else [
            f"DS 27B offline; agents {list(AGENTS)}; MaxLen {', '.join(MAX_LENS)}",
        ]  # fmt: skip
        setup += [
            "topologies " + ", ".join(topo(p, d) for p, d in TOPOLOGIES)
            + f"; policies {', '.join(POLICIES)}; speedup = JCT basic / JCT dualpath",
        ]  # fmt: skip
        return Summary(
            rows=rows,
            tables=[Table("JCT per P/D ratio (emulated seconds)", header, table)],
            plots=[Plot("pd_ratio.png", "JCT per P/D ratio and policy", draw)],
            setup=setup,
        )
