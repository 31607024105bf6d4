"""§4.2 — the bottleneck-free P/D range of the dual path (DS 27B, DualPath, P/D sweep).

Theory (paper §4.2 eq. 9; docs/sources.md#bottleneck-free-range): with g GPUs per node, CNIC
bandwidth B per GPU, storage bandwidth s·B per node and DRAM bandwidth M per node, every SNIC
can be saturated without a CNIC or DRAM bottleneck for
s/(g−s) ≤ P/D ≤ min{(g−2s)/s, (g−s)/(2s), (M/(Bs) − 3)/2}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Report, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import failed, fmt, mean, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import (
    ARM_27B,
    QUICK_SETUP,
    build,
    labels,
    max_len,
    run_key,
    topo,
)
from dualpath.model.config.settings import Scenario

NAME = "pd-range"
TOPOLOGIES = ((1, 7), (1, 4), (1, 2), (1, 1), (2, 1), (3, 1), (7, 2), (4, 1), (6, 1))
QUICK_TOPOLOGIES = ((1, 2), (1, 1), (2, 1))
AGENTS_PER_NODE, QUICK_AGENTS_PER_NODE = 128, 2
MAX_LEN = "64k"
SNIC_SHARE = 0.90  # SNICs at least this busy relative to the best topology
BUSY = 0.95  # no CNIC direction or DRAM above this utilisation
CRITERION = (
    f"in range = mean SNIC read utilisation over all nodes ≥ {SNIC_SHARE:.0%} of the best "
    f"swept topology's, busiest CNIC direction (all VLs) ≤ {BUSY:.0%} and busiest node DRAM "
    f"≤ {BUSY:.0%} (whole-run means)"
)


def bottleneck_free_range(g: float, s: float, m_gbs: float, bs_gbs: float) -> tuple[float, float]:
    """(lower, upper) P/D bounds; g GPUs/node, s = SNIC/CNIC bandwidth ratio, M = DRAM GB/s
    per node, Bs = SNIC GB/s per node. The range is empty when lower > upper."""
    lower = s / (g - s) if g > s else math.inf
    upper = min((g - 2 * s) / s, (g - s) / (2 * s), (m_gbs / bs_gbs - 3) / 2)
    return lower, upper


def scenario_range(sc: Scenario) -> tuple[float, float]:
    h = sc.hardware
    b, bs = h.cnic_gbps / 8, h.snic_gbps / 8  # GB/s
    return bottleneck_free_range(sc.topology.gpus_per_node, bs / b, h.dram_gbs, bs)


@dataclass(frozen=True, slots=True)
class Point:
    p: int
    d: int
    snic_all: float | None
    snic_prefill: float | None
    snic_decode: float | None
    cnic_kv_max: float | None
    cnic_max: float | None
    dram_max: float | None
    jct: float | None

    @property
    def ratio(self) -> float:
        return self.p / self.d


def measure(p: int, d: int, rep: Report | None, kv_vl: int) -> Point:
    per_node = pick(rep, "snic.per_node")
    utils: dict[str, float | None] = {}
    if isinstance(per_node, dict) and not failed(rep):
        utils = {name: num(v, "read_util") for name, v in per_node.items()}
    return Point(
        p, d,
        snic_all=mean(utils.values()),
        snic_prefill=mean(u for n, u in utils.items() if n.startswith("prefill")),
        snic_decode=mean(u for n, u in utils.items() if n.startswith("decode")),
        cnic_kv_max=num(rep, f"cnic.max_util_by_vl.{kv_vl}"),
        cnic_max=num(rep, "cnic.max_util"),
        dram_max=num(rep, "dram.max_util"),
        jct=None if failed(rep) else num(rep, "jct_s"),
    )  # fmt: skip


def in_range(points: list[Point]) -> list[Point]:
    best = max((pt.snic_all for pt in points if pt.snic_all is not None), default=None)
    if best is None:
        return []
    return [
        pt
        for pt in points
        if pt.snic_all is not None
        and pt.snic_all >= SNIC_SHARE * best
        and pt.cnic_max is not None
        and pt.cnic_max <= BUSY
        and pt.dram_max is not None
        and pt.dram_max <= BUSY
    ]


def _topologies(quick: bool) -> tuple[tuple[int, int], ...]:
    return QUICK_TOPOLOGIES if quick else TOPOLOGIES


def _key(quick: bool, p: int, d: int) -> str:
    per = QUICK_AGENTS_PER_NODE if quick else AGENTS_PER_NODE
    return run_key(
        "ds27b", topo(p, d), max_len(quick, MAX_LEN), f"a{per * (p + d)}", "dualpath", quick=quick
    )


def _scenario(quick: bool, p: int, d: int) -> Scenario:
    per = QUICK_AGENTS_PER_NODE if quick else AGENTS_PER_NODE
    return build(ARM_27B, quick, policy="dualpath", agents=per * (p + d), max_len=MAX_LEN,
                 prefill=p, decode=d)  # fmt: skip


class PdRange(Experiment):
    name = NAME
    title = "§4.2 — bottleneck-free P/D range of the dual path (DS 27B, DualPath)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for p, d in _topologies(quick):
            sc = _scenario(quick, p, d)
            specs.append(RunSpec(_key(quick, p, d), sc, labels(sc, pd_ratio=round(p / d, 4))))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        sc = _scenario(quick, 1, 1)
        lower, upper = scenario_range(sc)
        h = sc.hardware
        hw = (
            f"g={sc.topology.gpus_per_node}, s={h.snic_gbps / h.cnic_gbps:g}, "
            f"M={h.dram_gbs:g} GB/s, Bs={h.snic_gbps / 8:g} GB/s (from the scenario)"
        )
        points = [measure(p, d, results.get(_key(quick, p, d)), sc.vl.kv_vl)
                  for p, d in _topologies(quick)]  # fmt: skip
        good = in_range(points)
        lo = min((pt.ratio for pt in good), default=None)
        hi = max((pt.ratio for pt in good), default=None)
        swept = ", ".join(topo(p, d) for p, d in _topologies(quick))
        rows = [
            paper_row(NAME, "lower_bound", lower, f"theory, {hw}", quick=quick,
                      what="theory: lower P/D bound s/(g−s)"),
            paper_row(NAME, "upper_bound", upper, f"theory, {hw}", quick=quick,
                      what="theory: upper P/D bound min{(g−2s)/s, (g−s)/(2s), (M/(Bs)−3)/2}"),
            paper_row(NAME, "lower_bound", lo, f"{CRITERION}; swept {swept}", quick=quick,
                      what="measured: smallest swept P/D in range"),
            paper_row(NAME, "upper_bound", hi, f"{CRITERION}; swept {swept}", quick=quick,
                      what="measured: largest swept P/D in range"),
        ]  # fmt: skip
        header = ["P/D", "topology", "agents", "SNIC all", "SNIC prefill", "SNIC decode"]
        header += ["CNIC KV-VL max", "CNIC max", "DRAM max", "JCT (s)", "theory", "measured"]

        def pct(v: float | None) -> str:
            return "—" if v is None else f"{v * 100:.1f} %"

        per = QUICK_AGENTS_PER_NODE if quick else AGENTS_PER_NODE
        table = [
            [
                f"{pt.ratio:.3g}", topo(pt.p, pt.d), str(per * (pt.p + pt.d)),
                pct(pt.snic_all), pct(pt.snic_prefill), pct(pt.snic_decode), pct(pt.cnic_kv_max),
                pct(pt.cnic_max), pct(pt.dram_max), fmt(pt.jct, 0),
                "in" if lower <= pt.ratio <= upper else "out", "in" if pt in good else "out",
            ]
            for pt in points
        ]  # fmt: skip
        xs = [pt.ratio for pt in points]
        series = {
            "SNIC read, all nodes": [pt.snic_all for pt in points],
            "SNIC read, prefill": [pt.snic_prefill for pt in points],
            "SNIC read, decode": [pt.snic_decode for pt in points],
            "CNIC max (KV VL)": [pt.cnic_kv_max for pt in points],
            "CNIC max (all VLs)": [pt.cnic_max for pt in points],
            "DRAM max": [pt.dram_max for pt in points],
        }

        def draw(path: Path) -> None:
            ticks = {pt.ratio: topo(pt.p, pt.d) for pt in points}
            panel = charts.Panel(f"DS 27B DualPath · theory range {lower:.3g}…{upper:.3g}", xs,
                                 series, span=(lower, upper), xticks=ticks)  # fmt: skip
            charts.line_panels(path, [panel], xlabel="P/D (log scale)", ylabel="utilisation",
                               title="§4.2 — bottleneck-free range", logx=True,
                               size=(9.0, 5.0))  # fmt: skip

        setup = [QUICK_SETUP] if quick else [f"DS 27B DualPath offline, {MAX_LEN}"]
        setup += [
            f"P/D swept over {swept}; {per} agents per node (agents ∝ nodes)",
            f"theory range {lower:.4g} ≤ P/D ≤ {upper:.4g} for {hw}",
            CRITERION,
        ]
        return Summary(
            rows=rows,
            tables=[Table("Utilisation per topology (whole-run means)", header, table)],
            plots=[Plot("pd_range.png", "utilisation vs P/D with the theory range", draw)],
            setup=setup,
        )
