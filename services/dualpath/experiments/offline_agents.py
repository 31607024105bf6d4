"""Fig. 7 — offline JCT vs number of agents, per model and MaxLen; Basic, DualPath, Oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, Row, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, vmax, vmin
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_27B, ARM_660B, QUICK_SETUP, Arm, build, labels
from dualpath.experiments.scenarios import run_key as key_of

NAME = "offline-agents"
POLICIES = ("basic", "dualpath", "oracle")
MAX_LENS = ("32k", "48k", "64k")
AGENTS = {ARM_660B.slug: (1024, 2048), ARM_27B.slug: (256, 512, 1024)}
QUICK_AGENTS = (4, 6)
ARMS = (ARM_660B, ARM_27B)
Getter = Callable[[Arm, str, int, str], float | None]


def _grid(quick: bool) -> list[tuple[Arm, str, int]]:
    max_lens = ("32k",) if quick else MAX_LENS
    return [
        (arm, ml, a)
        for arm in ARMS
        for ml in max_lens
        for a in (QUICK_AGENTS if quick else AGENTS[arm.slug])
    ]


def _key(arm: Arm, quick: bool, max_len: str, agents: int, policy: str) -> str:
    return key_of(arm.slug, arm.topo(quick), max_len, f"a{agents}", policy, quick=quick)


class OfflineAgents(Experiment):
    name = NAME
    title = "Fig. 7 — offline JCT vs agents (Basic, DualPath, Oracle)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for arm, ml, agents in _grid(quick):
            for pol in POLICIES:
                sc = build(arm, quick, policy=pol, agents=agents, max_len=ml)
                specs.append(
                    RunSpec(_key(arm, quick, ml, agents, pol), sc, labels(sc, arm=arm.slug))
                )
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        def get(arm: Arm, ml: str, a: int, pol: str) -> float | None:
            return jct(results.get(_key(arm, quick, ml, a, pol)))

        grid = _grid(quick)
        speedup: dict[str, list[float | None]] = {arm.slug: [] for arm in ARMS}
        gap: dict[str, list[float | None]] = {arm.slug: [] for arm in ARMS}
        table_rows: list[list[str]] = []
        for arm, ml, a in grid:
            b, d, o = (get(arm, ml, a, p) for p in POLICIES)
            speedup[arm.slug].append(div(b, d))
            gap[arm.slug].append(div(d, o))
            cells = [
                cell(results.get(_key(arm, quick, ml, a, p)), get(arm, ml, a, p)) for p in POLICIES
            ]
            table_rows.append(
                [
                    arm.name(quick),
                    arm.topo(quick),
                    ml,
                    str(a),
                    *cells,
                    fmt(div(b, d)),
                    fmt(div(d, o)),
                ]
            )
        # The paper's "2048 agents, 64K" point; quick mode stands in its largest quick point.
        ml_big, a_big = ("32k", QUICK_AGENTS[-1]) if quick else ("64k", 2048)
        at = f"{ARM_660B.topo(quick)} {ml_big}, {a_big} agents"
        rows: list[Row] = [
            paper_row(NAME, "ds660b_max_speedup", vmax(speedup[ARM_660B.slug]), quick=quick),
            paper_row(NAME, "ds27b_max_speedup", vmax(speedup[ARM_27B.slug]), quick=quick),
            paper_row(NAME, "ds27b_oracle_gap_min", vmin(gap[ARM_27B.slug]), quick=quick),
            paper_row(NAME, "ds27b_oracle_gap_max", vmax(gap[ARM_27B.slug]), quick=quick),
            paper_row(
                NAME, "ds660b_64k_2048_basic_jct", get(ARM_660B, ml_big, a_big, "basic"),
                f"ours at {at}", quick=quick,
            ),
            paper_row(
                NAME, "ds660b_64k_2048_dualpath_jct", get(ARM_660B, ml_big, a_big, "dualpath"),
                f"ours at {at}", quick=quick,
            ),
        ]  # fmt: skip
        header = ["model", "P/D", "MaxLen", "agents", "Basic JCT (s)", "DualPath JCT (s)"]
        header += ["Oracle JCT (s)", "Basic/DualPath", "DualPath/Oracle"]
        return Summary(
            rows=rows,
            tables=[Table("JCT grid (emulated seconds)", header, table_rows)],
            plots=[
                Plot("jct_vs_agents.png", "JCT vs agents", lambda p: _plot(p, quick, grid, get))
            ],
            setup=self._setup(quick),
        )

    def _setup(self, quick: bool) -> list[str]:
        if quick:
            return [QUICK_SETUP, f"agents {list(QUICK_AGENTS)}; policies {', '.join(POLICIES)}"]
        return [
            "offline: N agents start together; JCT when every trajectory has finished",
            f"DS 660B (DeepSeek-V3.2) 2P4D, agents {list(AGENTS['ds660b'])}; "
            f"DS 27B 1P1D, agents {list(AGENTS['ds27b'])}; MaxLen {', '.join(MAX_LENS)}",
            f"policies: {', '.join(POLICIES)} (paper: Ours(basic), Ours, Ours(oracle))",
        ]


def _plot(path: Path, quick: bool, grid: list[tuple[Arm, str, int]], get: Getter) -> None:
    panels: list[charts.Panel] = []
    for arm in ARMS:
        for ml in dict.fromkeys(m for a, m, _ in grid if a is arm):
            xs = [n for a, m, n in grid if a is arm and m == ml]
            series = {p: [get(arm, ml, n, p) for n in xs] for p in POLICIES}
            panels.append(
                charts.Panel(f"{arm.name(quick)} {arm.topo(quick)} · {ml}", list(xs), series)
            )
    charts.line_panels(
        path, panels, xlabel="agents", ylabel="JCT (emulated s)", title="Fig. 7 — offline JCT"
    )
