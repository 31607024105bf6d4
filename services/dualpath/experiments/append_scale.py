"""Fig. 9 — offline JCT vs append-length scale (left) and generation-length scale (right),
DS 660B, 64K, 1024 agents.

Both panels multiply one per-round length of every trajectory by a constant and cut the
trajectory at MaxLen (§7.3); they differ only in the workload knob, so one class serves both.
"""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, div, fmt, jct, vmax, vmin
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, run_key

POLICIES = ("basic", "dualpath", "oracle")
SCALES = (1.0, 1.5, 2.0, 3.0)
QUICK_SCALES = (1.0, 3.0)
AGENTS, QUICK_AGENTS = 1024, 4
MAX_LEN = "64k"


class _LengthScale(Experiment):
    """One Fig. 9 panel: `knob` (a `workload` setting) × SCALES × POLICIES."""

    knob = "append_scale"
    key_prefix = "x"  # run keys: ...-x1.5-basic (append), ...-g1.5-basic (generation)
    what = "append"
    panel = "left"

    def _scales(self, quick: bool) -> tuple[float, ...]:
        return QUICK_SCALES if quick else SCALES

    def _key(self, quick: bool, scale: float, pol: str) -> str:
        agents = QUICK_AGENTS if quick else AGENTS
        topo = ARM_660B.topo(quick)
        mal = max_len(quick, MAX_LEN)
        tag = f"{self.key_prefix}{scale:g}"
        return run_key("ds660b", topo, mal, f"a{agents}", tag, pol, quick=quick)

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for scale in self._scales(quick):
            for pol in POLICIES:
                sc = build(
                    ARM_660B, quick, policy=pol, agents=QUICK_AGENTS if quick else AGENTS,
                    max_len=MAX_LEN, extra={"workload": {self.knob: scale}},
                )  # fmt: skip
                key = self._key(quick, scale, pol)
                specs.append(RunSpec(key, sc, labels(sc, **{self.knob: scale})))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        scales = self._scales(quick)

        def get(scale: float, pol: str) -> float | None:
            return jct(results.get(self._key(quick, scale, pol)))

        speedup = {s: div(get(s, "basic"), get(s, "dualpath")) for s in scales}
        trend = div(speedup[scales[-1]], speedup[scales[0]])
        rows = [
            paper_row(self.name, "min_speedup", vmin(speedup.values()), quick=quick),
            paper_row(self.name, "max_speedup", vmax(speedup.values()), quick=quick),
            paper_row(
                self.name, "trend", trend, f"speedup ×{scales[-1]:g} / ×{scales[0]:g}",
                quick=quick,
            ),
        ]  # fmt: skip
        table = [
            [
                f"×{s:g}",
                *[cell(results.get(self._key(quick, s, p)), get(s, p)) for p in POLICIES],
                fmt(speedup[s]),
                fmt(div(get(s, "dualpath"), get(s, "oracle"))),
            ]
            for s in scales
        ]
        header = [f"{self.what} scale", *[f"{p} JCT (s)" for p in POLICIES]]
        header += ["Basic/DualPath", "DualPath/Oracle"]
        series = {p: [get(s, p) for s in scales] for p in POLICIES}
        title = f"Fig. 9 ({self.panel}) — {self.what}-length scale"
        png = f"{self.knob}.png"

        def draw(path: Path) -> None:
            panel = charts.Panel(
                f"{ARM_660B.name(quick)} {ARM_660B.topo(quick)}", list(scales), series
            )
            charts.line_panels(
                path, [panel], xlabel=f"{self.what}-length scale",
                ylabel="JCT (emulated s)", title=title,
            )  # fmt: skip

        setup = [QUICK_SETUP] if quick else [
            f"DS 660B 2P4D offline, {MAX_LEN}, {AGENTS} agents"
        ]  # fmt: skip
        setup.append(
            f"every turn's {self.what} length multiplied by workload.{self.knob} "
            f"{', '.join(f'×{s:g}' for s in scales)}, trajectories cut at MaxLen; "
            f"policies {', '.join(POLICIES)}"
        )
        return Summary(
            rows=rows,
            tables=[Table(f"JCT per {self.what} scale (emulated seconds)", header, table)],
            plots=[Plot(png, f"JCT vs {self.what}-length scale", draw)],
            setup=setup,
        )


class AppendScale(_LengthScale):
    name = "append-scale"
    title = "Fig. 9 (left) — JCT vs append-length scale (DS 660B, 64K, 1024 agents)"


class GenScale(_LengthScale):
    name = "gen-scale"
    title = "Fig. 9 (right) — JCT vs generation-length scale (DS 660B, 64K, 1024 agents)"
    knob = "gen_scale"
    key_prefix = "g"
    what = "generation"
    panel = "right"
