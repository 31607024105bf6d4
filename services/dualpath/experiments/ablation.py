"""Fig. 12 (right) — ablation: Basic, + layerwise prefill, + dual path, + scheduler."""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, mean
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, run_key

NAME = "ablation"
# (policy, label, paper_figures key of its JCT change vs Basic)
STEPS = (
    ("basic", "Basic", ""),
    ("layerwise", "+ layerwise prefill", "layerwise_reduction"),
    ("dualpath-simple", "+ dual-path loading", "dual_path_reduction"),
    ("dualpath", "+ scheduler (DualPath)", "scheduler_reduction"),
)
AGENTS = (1024, 2048)
QUICK_AGENTS = (4, 6)
BASIC_KEYS = ("basic_jct_1024", "basic_jct_2048")
MAX_LEN = "64k"


def _pct(v: float | None) -> str:
    return fmt(v, 1) if v is None else f"{v:+.1f} %"


def _agents(quick: bool) -> tuple[int, ...]:
    return QUICK_AGENTS if quick else AGENTS


def _key(quick: bool, agents: int, pol: str) -> str:
    return run_key(
        "ds660b", ARM_660B.topo(quick), max_len(quick, MAX_LEN), f"a{agents}", pol, quick=quick
    )


class Ablation(Experiment):
    name = NAME
    title = "Fig. 12 (right) — ablation (DS 660B 2P4D, 64K)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for agents in _agents(quick):
            for pol, _, _ in STEPS:
                sc = build(ARM_660B, quick, policy=pol, agents=agents, max_len=MAX_LEN)
                specs.append(RunSpec(_key(quick, agents, pol), sc, labels(sc)))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        agents = _agents(quick)

        def get(a: int, pol: str) -> float | None:
            return jct(results.get(_key(quick, a, pol)))

        def change(a: int, pol: str) -> float | None:
            r = div(get(a, pol), get(a, "basic"))
            return None if r is None else (r - 1.0) * 100.0

        rows = [
            paper_row(
                NAME, fig, mean(change(a, pol) for a in agents),
                f"policy {pol}; mean over {' and '.join(map(str, agents))} agents", quick=quick,
            )
            for pol, _, fig in STEPS
            if fig
        ]  # fmt: skip
        for a, fig in zip(agents, BASIC_KEYS, strict=True):
            rows.append(paper_row(NAME, fig, get(a, "basic"), f"ours at {a} agents", quick=quick))
        header = ["step", "policy", *[f"JCT {a} agents (s)" for a in agents]]
        header += [f"vs Basic {a}" for a in agents]
        table = [
            [
                label,
                pol,
                *[cell(results.get(_key(quick, a, pol)), get(a, pol)) for a in agents],
                *[_pct(change(a, pol)) for a in agents],
            ]
            for pol, label, _ in STEPS
        ]
        groups = [label for _, label, _ in STEPS]
        series = {f"{a} agents": [get(a, pol) for pol, _, _ in STEPS] for a in agents}

        def draw(path: Path) -> None:
            charts.grouped_bars(
                path, groups, series, ylabel="JCT (emulated s)", title="Fig. 12 (right) — ablation"
            )

        setup = [QUICK_SETUP] if quick else [f"DS 660B 2P4D offline, {MAX_LEN}, agents {AGENTS}"]
        setup.append(
            "techniques added one at a time: " + " → ".join(f"{p} ({lbl})" for p, lbl, _ in STEPS)
        )
        return Summary(
            rows=rows,
            tables=[Table("JCT per ablation step (emulated seconds)", header, table)],
            plots=[Plot("ablation.png", "JCT per ablation step", draw)],
            setup=setup,
        )
