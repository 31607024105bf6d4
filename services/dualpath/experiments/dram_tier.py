"""Beyond the paper (issue 28): JCT of `basic`, `hicache`, `dualpath` and `dualpath+tier`
over agents × host-DRAM tier size, and where the tier alone is enough, where dual-path
loading wins and where both together win (docs/experiments.md, `dram-tier`).

`basic` and `dualpath` run without a tier, once per (model, agents): the DRAM axis does not
change them. `hicache` runs at every size, 0 included (then it is `layerwise`: SGLang
without HiCache's L2). `dualpath+tier` runs at every size but 0, where it is `dualpath`
(docs/tier.md), whose run stands in for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Report, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import cell, fmt, jct, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import (
    ARM_27B,
    ARM_660B,
    QUICK_SETUP,
    Arm,
    build,
    dram_tag,
    labels,
    max_len,
    run_key,
)

NAME = "dram-tier"
MAX_LEN = "64k"
ARMS = (ARM_660B, ARM_27B)
AGENTS = (256, 512, 1024, 2048, 4096, 8192)
DRAM = (0.0, 0.25e12, 0.5e12, 1e12, 1.5e12, 2e12)  # bytes per node
# Quick: the stand-ins' working sets are a few GB (32K, DS 27B, 2 GPUs per node), so the
# sizes shrink with them; enough to see a tier that holds all, part or none of it.
QUICK_AGENTS = (4, 8)
QUICK_DRAM = (0.0, 0.5e9, 4e9)
TIERLESS = ("basic", "dualpath")
TIERED = ("hicache", "dualpath+tier")
POLICIES = ("basic", "hicache", "dualpath", "dualpath+tier")
# Two JCTs within 2 % are a tie: same-instant event order alone moves a JCT by a few per
# cent (docs/experiments.md, "Where the scale runs lose time").
TIE = 0.02
# The categories of a cell, in the plot's legend order, and their colours.
CATEGORIES = {
    "tier alone": "tab:orange",  # hicache as fast as the best
    "either": "tab:olive",  # hicache and dualpath both as fast as the best
    "dual path": "tab:blue",  # dualpath (no tier) as fast as the best, hicache is not
    "both": "tab:green",  # only dualpath+tier is as fast as the best
    "basic": "tab:gray",
}


@dataclass(frozen=True, slots=True)
class Point:
    arm: Arm
    agents: int
    dram: float  # tier bytes per node


def grid(quick: bool) -> list[Point]:
    agents = QUICK_AGENTS if quick else AGENTS
    dram = QUICK_DRAM if quick else DRAM
    return [Point(arm, a, d) for arm in ARMS for a in agents for d in dram]


def runs_of(p: Point) -> list[tuple[str, float]]:
    """The (policy, tier bytes) runs that point `p` adds to the grid, besides runs shared
    with other points (the tier-less ones belong to the point at DRAM 0)."""
    out = [(pol, 0.0) for pol in TIERLESS] if p.dram == 0 else []
    out.append(("hicache", p.dram))
    if p.dram > 0:
        out.append(("dualpath+tier", p.dram))
    return out


def key(arm: Arm, quick: bool, agents: int, policy: str, dram: float) -> str:
    """Tier-less runs have offline-agents' keys (and scenarios: they are shared with it);
    tiered ones end in the size, e.g. ds660b-2p4d-64k-a1024-hicache-dram1500gb."""
    tag = dram_tag(dram) if policy in TIERED else ""
    ml = max_len(quick, MAX_LEN)
    return run_key(arm.slug, arm.topo(quick), ml, f"a{agents}", policy, tag, quick=quick)


def run_of(p: Point, policy: str) -> tuple[str, float]:
    """The run that gives `policy`'s JCT at `p`."""
    if policy in TIERLESS or (policy == "dualpath+tier" and p.dram == 0):
        return ("dualpath" if policy == "dualpath+tier" else policy), 0.0
    return policy, p.dram


def classify(
    b: float | None, h: float | None, d: float | None, t: float | None, *, tie: float = TIE
) -> tuple[str, float] | None:
    """The cell's category and by how much it wins (a JCT ratio ≥ 1), or None when a JCT is
    missing. A policy "is as fast as the best" within `tie`."""
    if b is None or h is None or d is None or t is None:
        return None
    best = min(b, h, d, t)
    ok_h, ok_d, ok_t = (v <= best * (1 + tie) for v in (h, d, t))
    if ok_h and ok_d:
        return "either", max(h, d) / min(h, d)
    if ok_h:
        return "tier alone", d / h
    if ok_d:
        return "dual path", h / d
    if ok_t:
        return "both", min(h, d) / t
    return "basic", min(h, d, t) / b


class DramTier(Experiment):
    name = NAME
    title = "Beyond the paper — DRAM KV tier vs dual-path loading (JCT, agents × DRAM)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for p in grid(quick):
            for pol, dram in runs_of(p):
                extra = {"tier": {"dram_bytes_per_node": dram}} if dram > 0 else None
                sc = build(p.arm, quick, policy=pol, agents=p.agents, max_len=MAX_LEN, extra=extra)
                lab = labels(sc, arm=p.arm.slug, dram_bytes_per_node=dram)
                specs.append(RunSpec(key(p.arm, quick, p.agents, pol, dram), sc, lab))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        def report(p: Point, pol: str) -> Report | None:
            r_pol, dram = run_of(p, pol)
            return results.get(key(p.arm, quick, p.agents, r_pol, dram))

        points = grid(quick)
        rows_t: list[list[str]] = []
        maps: dict[str, dict[tuple[int, float], tuple[str, str]]] = {a.slug: {} for a in ARMS}
        for p in points:
            if not any(key(p.arm, quick, p.agents, *run) in results for run in runs_of(p)):
                continue  # a reduced grid (--only): no run of this cell's own, no row
            reps = [report(p, pol) for pol in POLICIES]
            jcts = [jct(r) for r in reps]
            got = classify(*jcts)
            binds = [_binding(r) for r in reps]
            share = num(reps[1], "tier.hit_share.storage") if p.dram > 0 or not reps[1] else 1.0
            best = POLICIES[min(range(4), key=lambda i: jcts[i] or float("inf"))]
            rows_t.append([
                p.arm.name(quick), p.arm.topo(quick), str(p.agents), _size(p.dram),
                *[cell(r, v) for r, v in zip(reps, jcts, strict=True)],
                fmt(None if share is None else 100 * share, 1),
                got[0] if got else "—", fmt(got[1] if got else None),
                " / ".join(binds),
            ])  # fmt: skip
            if got is not None:
                text = f"{got[0]}\n×{got[1]:.2f}\n{binds[POLICIES.index(best)]}"
                maps[p.arm.slug][(p.agents, p.dram)] = (got[0], text)
        header = ["model", "P/D", "agents", "DRAM/node"]
        header += [f"{pol} JCT (s)" for pol in POLICIES]
        header += ["hicache hit from storage (%)", "region", "by ×", "binds (B / H / D / D+T)"]
        big = QUICK_AGENTS[-1] if quick else 2048
        fig7 = Point(ARM_660B, big, 0.0)
        at = f"ours at {ARM_660B.topo(quick)} {max_len(quick, MAX_LEN)}, {big} agents"
        rows = [
            paper_row(NAME, "ds660b_64k_2048_basic_jct", jct(report(fig7, "basic")), at,
                      quick=quick),
            paper_row(NAME, "ds660b_64k_2048_dualpath_jct", jct(report(fig7, "dualpath")), at,
                      quick=quick),
        ]  # fmt: skip
        plot = Plot("dram_tier_regions.png", "which design wins, by agents and DRAM tier",
                    lambda path: _plot(path, quick, maps))  # fmt: skip
        return Summary(
            rows=rows,
            tables=[Table("JCT per cell (emulated s), region and binding bound", header, rows_t)],
            plots=[plot],
            setup=_setup(quick),
            notes=NOTES,
        )


NOTES = [
    f"region: 'tier alone' = hicache within {TIE:.0%} of the best JCT of the cell; 'dual path' "
    "= dualpath (no tier) within it and hicache not; 'both' = only dualpath+tier; 'either' "
    "= hicache and dualpath both; 'by ×' = the JCT of the best outside the region over the "
    "region's (tier alone: dualpath / hicache; dual path: hicache / dualpath; both: the "
    "better of the two / dualpath+tier)",
    "binds: `bounds.binding` of each run (docs/report.md): the resource whose lower bound on "
    "the JCT is the largest; storage_read counts only bytes read from storage (tier hits are "
    "not), cnic includes the remote-DRAM reads",
    "basic and dualpath have no tier: the same run on every DRAM row; dualpath+tier at 0 is "
    "dualpath's run, hicache at 0 is layerwise with sticky placement",
    "a row per cell with a run of its own (its tiered runs; at 0 also basic and dualpath): "
    "cells a reduced grid (--only) did not run are left out, and show as 'no run' on the map",
]


def _binding(r: Report | None) -> str:
    b = pick(r, "bounds.binding")
    return str(b) if isinstance(b, str) else "—"


def _size(dram: float) -> str:
    return "0" if dram == 0 else (f"{dram / 1e12:g} TB" if dram >= 1e11 else f"{dram / 1e9:g} GB")


def _setup(quick: bool) -> list[str]:
    agents, dram = (QUICK_AGENTS, QUICK_DRAM) if quick else (AGENTS, DRAM)
    head = [QUICK_SETUP] if quick else [
        f"offline, {MAX_LEN}: DS 660B 2P4D and DS 27B 1P1D; every agent starts at t = 0"
    ]  # fmt: skip
    return [
        *head,
        f"agents {list(agents)}; DRAM tier per node {', '.join(_size(d) for d in dram)} "
        "(tier.dram_bytes_per_node; LRU, remote hits on: docs/tier.md)",
        "policies: basic and dualpath without a tier; hicache and dualpath+tier with it",
        "a reduced grid: --only on the run keys, e.g. --only "
        "'^ds27b-1p1d-64k-a(256|1024)-(basic|dualpath|(hicache|dualpath_tier)-dram(0|1500)gb)$'",
    ]


def _plot(path: Path, quick: bool, maps: dict[str, dict[tuple[int, float], tuple[str, str]]],
          ) -> None:  # fmt: skip
    agents, dram = (QUICK_AGENTS, QUICK_DRAM) if quick else (AGENTS, DRAM)
    panels = [
        charts.CategoryMap(
            title=f"{arm.name(quick)} {arm.topo(quick)}",
            x=[str(a) for a in agents],
            y=[_size(d) for d in dram],
            cells=[[maps[arm.slug].get((a, d)) for a in agents] for d in dram],
        )
        for arm in ARMS
    ]
    charts.category_maps(
        path, panels, CATEGORIES, xlabel="agents", ylabel="DRAM tier per node",
        title=f"Which design wins ({max_len(quick, MAX_LEN)}, JCT; ties within {TIE:.0%})",
    )  # fmt: skip
