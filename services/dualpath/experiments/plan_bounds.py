"""Upper bounds on the arrival rate a candidate cluster can sustain, from the bound analysis
of report/bounds.py (docs/planner.md, "Pruning").

A sample of the workload's agents (their turns' prompt, hit and gen tokens, no run) is the
work of `n` agents. Each bound of report/bounds.py is the time one resource of the candidate
needs for that work at its best rate, so in a steady state at λ agents/s the resource is busy
λ x s / n of each second: λ <= n / s. The smallest such λ over the resources bounds the
capacity. The batch limits of report/bounds.py that depend on the number of sessions are
lifted (online, the sessions in flight depend on λ), which only lowers each time, so the
rate bound stays above any capacity.

The SLO floor: a TPOT below one decode step alone (batch 1, no context) or a TTFT below the
fastest turn's prefill alone cannot be met at any rate; such a candidate is ruled out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dualpath.experiments.plan_search import Bound, Slo
from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.roofline import Roofline
from dualpath.model.workload.script import mean_shape
from dualpath.report.bounds import ClusterFacts, decode_bound, prefill_bound
from dualpath.report.facts import cluster_facts
from dualpath.runtimes.cluster import build_cluster

UNLIMITED_SESSIONS = 10**12  # lifts the sessions-per-GPU batch limit (see the module doc)


@dataclass(frozen=True, slots=True)
class SampleWork:
    """The turns of `agents` sample agents: (hit, new) per turn, prompts and gens."""

    agents: int
    shapes: tuple[tuple[int, int], ...]  # (hit, new) of every turn
    prompt: np.ndarray
    gen: np.ndarray
    hit_tokens: int  # tokens whose KV comes from storage (whole blocks, one fewer per turn)
    mean_context: int
    mean_append: int


def sample_work(sc: Scenario, agents: int) -> SampleWork:
    """`agents` agents of the scenario's workload (its source, MaxLen, scales and seed)."""
    w = build_workload(sc, agents)
    turns = [t for s in w.scripts for t in s.turns]
    shapes = tuple((t.prompt - min(t.append, t.prompt), min(t.append, t.prompt)) for t in turns)
    block = sc.engine.block_tokens
    ctx, app = mean_shape(w.scripts)
    return SampleWork(
        agents=len(w.scripts),
        shapes=shapes,
        prompt=np.array([t.prompt for t in turns], dtype=np.int64),
        gen=np.array([t.gen for t in turns], dtype=np.int64),
        # A run reads a turn's matched whole blocks; one block fewer per turn keeps this at or
        # below what any run reads (the smoke preset reads 10 blocks in 200k fewer than h//b).
        hit_tokens=sum(max(0, h // block - 1) * block for h, _ in shapes),
        mean_context=ctx,
        mean_append=app,
    )


Built = tuple[ClusterFacts, Roofline, Roofline, str]


def built_facts(sc: Scenario, work: SampleWork) -> Built:
    """The candidate's facts exactly as its report would have them (report/facts.py), its
    rooflines, and where its policy reads hits from storage: `none` (a DRAM tier, or the
    Oracle's zero-time I/O: no storage bound), `pe` (PE-side reads only) or `both`. The
    cluster is built (not run) on a virtual clock."""

    async def build(clock: VirtualClock) -> Built:
        c = build_cluster(sc, clock, work.mean_context, work.mean_append)
        pol = c.policy
        reads = "none" if pol.oracle or sc.tier.dram_bytes_per_node > 0 else (
            "both" if pol.dual_path else "pe"
        )  # fmt: skip
        facts = cluster_facts(c, UNLIMITED_SESSIONS)
        return facts, c.prefill_roofline, c.decode_roofline, reads

    result: Built = run_virtual(build)
    return result


def least_shapes(shapes: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """The (hit, new) shapes no other shape is below in both: a prefill's time grows with
    either, so the fastest turn is among these (a handful instead of every turn)."""
    out: list[tuple[int, int]] = []
    for hit, new in sorted({s for s in shapes if s[1] > 0}, key=lambda s: (s[1], s[0])):
        if not out or hit < out[-1][0]:
            out.append((hit, new))
    return out


def slo_floor(pe: Roofline, de: Roofline, work: SampleWork, slo: Slo) -> str | None:
    """The SLO term no rate can meet on this cluster, or None."""
    step = de.decode_step_time(1, 0, 0)
    if step > slo.tpot_s:
        return f"tpot: one decode step alone takes {step * 1e3:.1f} ms > {slo.tpot_s * 1e3:g} ms"
    fastest = min((pe.prefill_time([s]) for s in least_shapes(work.shapes)), default=0.0)
    if fastest > slo.ttft_s:
        return f"ttft: the fastest turn's prefill alone takes {fastest:.2f} s > {slo.ttft_s:g} s"
    return None


def rate_bound(
    facts: ClusterFacts, pe: Roofline, de: Roofline, work: SampleWork, reads: str
) -> tuple[float, str]:
    """(APS bound, binding resource). Unless `reads` is `none`, every hit is read from
    storage: over the PE nodes' SNICs (`pe`), or over every node's at best (`both`: the
    `pooled_s` of report/bounds.py, whatever the split)."""
    new = [s for s in work.shapes if s[1] > 0]
    times = {
        "prefill": float(prefill_bound(pe, facts, new)["s"]),
        "decode": float(decode_bound(de, facts, work.prompt, work.gen)["s"]),
    }
    if reads != "none":
        nodes = facts.pe_nodes + (facts.de_nodes if reads == "both" else 0)
        snics = nodes * facts.snic_read_bytes_s
        times["storage_read"] = work.hit_tokens * pe.kv_bytes_per_token / snics
    binding = max(times, key=lambda k: times[k])
    s = times[binding]
    return (work.agents / s if s > 0 else math.inf), binding


def candidate_bound(sc: Scenario, work: SampleWork, slo: Slo) -> Bound:
    """The bound of the candidate whose scenario is `sc`."""
    facts, pe, de, reads = built_facts(sc, work)
    floor = slo_floor(pe, de, work, slo)
    if floor is not None:
        return Bound(0.0, floor, feasible=False)
    aps, binding = rate_bound(facts, pe, de, work, reads)
    return Bound(aps, binding)
