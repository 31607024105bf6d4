"""Fig. 9 (left) — offline JCT vs append-length scale (DS 660B, 64K, 1024 agents)."""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, vmax, vmin
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, run_key

NAME = "append-scale"
POLICIES = ("basic", "dualpath", "oracle")
SCALES = (1.0, 1.5, 2.0, 3.0)
QUICK_SCALES = (1.0, 3.0)
AGENTS, QUICK_AGENTS = 1024, 4
MAX_LEN = "64k"


def _scales(quick: bool) -> tuple[float, ...]:
    return QUICK_SCALES if quick else SCALES


def _key(quick: bool, scale: float, pol: str) -> str:
    agents = QUICK_AGENTS if quick else AGENTS
    return run_key(
        "ds660b",
        ARM_660B.topo(quick),
        max_len(quick, MAX_LEN),
        f"a{agents}",
        f"x{scale:g}",
        pol,
        quick=quick,
    )


class AppendScale(Experiment):
    name = NAME
    title = "Fig. 9 (left) — JCT vs append-length scale (DS 660B, 64K, 1024 agents)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for scale in _scales(quick):
            for pol in POLICIES:
                sc = build(
                    ARM_660B, quick, policy=pol, agents=QUICK_AGENTS if quick else AGENTS,
                    max_len=MAX_LEN, extra={"workload": {"append_scale": scale}},
                )  # fmt: skip
                specs.append(RunSpec(_key(quick, scale, pol), sc, labels(sc, append_scale=scale)))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        scales = _scales(quick)

        def get(scale: float, pol: str) -> float | None:
            return jct(results.get(_key(quick, scale, pol)))

        speedup = {s: div(get(s, "basic"), get(s, "dualpath")) for s in scales}
        rows = [
            paper_row(NAME, "min_speedup", vmin(speedup.values()), quick=quick),
            paper_row(NAME, "max_speedup", vmax(speedup.values()), quick=quick),
            paper_row(
                NAME, "trend", div(speedup[scales[-1]], speedup[scales[0]]),
                f"speedup ×{scales[-1]:g} / ×{scales[0]:g}", quick=quick,
            ),
        ]  # fmt: skip
        table = [
            [
                f"×{s:g}",
                *[cell(results.get(_key(quick, s, p)), get(s, p)) for p in POLICIES],
                fmt(speedup[s]),
                fmt(div(get(s, "dualpath"), get(s, "oracle"))),
            ]
            for s in scales
        ]
        header = ["append scale", *[f"{p} JCT (s)" for p in POLICIES]]
        header += ["Basic/DualPath", "DualPath/Oracle"]
        series = {p: [get(s, p) for s in scales] for p in POLICIES}

        def draw(path: Path) -> None:
            charts.line_panels(
                path,
                [
                    charts.Panel(
                        f"{ARM_660B.name(quick)} {ARM_660B.topo(quick)}", list(scales), series
                    )
                ],
                xlabel="append-length scale",
                ylabel="JCT (emulated s)",
                title="Fig. 9 (left) — append-length scale",
            )

        setup = [QUICK_SETUP] if quick else [
            f"DS 660B 2P4D offline, {MAX_LEN}, {AGENTS} agents"
        ]  # fmt: skip
        setup.append(
            "every turn's append multiplied by workload.append_scale "
            f"{', '.join(f'×{s:g}' for s in scales)}, trajectories cut at MaxLen; "
            f"policies {', '.join(POLICIES)}"
        )
        return Summary(
            rows=rows,
            tables=[Table("JCT per append scale (emulated seconds)", header, table)],
            plots=[Plot("append_scale.png", "JCT vs append-length scale", draw)],
            setup=setup,
        )
