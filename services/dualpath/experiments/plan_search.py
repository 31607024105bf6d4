"""The capacity planner's search, free of the model (docs/planner.md): the SLO flag, the
candidates, the pruning rule, the ranking and the Pareto front. Pure: numbers in, numbers out.

A candidate is one cluster shape: policy, P and D nodes, the EP group size in nodes and the
host-DRAM tier per node. Each gets an upper bound on the arrival rate it can sustain (from
report/bounds.py, computed by experiments/plan.py) and, if it is run, a measured capacity (the
online-capacity rule). The search runs candidates best bound first and skips, and counts, a
candidate whose bound per GPU is already below the best capacity per GPU measured so far: it
cannot win (docs/planner.md, "Pruning").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SLO_KEYS = ("ttft", "tpot")
SLO_EXAMPLE = "ttft=4,tpot=0.05"
TIER_POLICIES = frozenset({"hicache", "dualpath+tier"})  # the policies built on the DRAM tier


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float  # window-mean time to first token, seconds
    tpot_s: float  # window-mean time per output token, seconds


def parse_slo(text: str) -> Slo:
    """`ttft=4,tpot=0.05` (seconds) -> Slo. ValueError names the flag and the fix."""
    fix = f"use --slo {SLO_EXAMPLE} (seconds, both keys)"
    values: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, raw = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_KEYS:
            raise ValueError(f"--slo {text!r}: {part!r} is not ttft=SECONDS or tpot=SECONDS; {fix}")
        if key in values:
            raise ValueError(f"--slo {text!r}: {key} given twice; {fix}")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--slo {text!r}: {key}={raw.strip()!r} must be seconds > 0; {fix}")
        values[key] = value
    missing = [k for k in SLO_KEYS if k not in values]
    if missing:
        raise ValueError(f"--slo {text!r}: {' and '.join(missing)} missing; {fix}")
    return Slo(values["ttft"], values["tpot"])


@dataclass(frozen=True, slots=True)
class Candidate:
    policy: str
    prefill: int  # nodes
    decode: int
    gpus_per_node: int
    ep_nodes: int = 0  # nodes per EP group on each side; 0 = all nodes of the side
    dram_bytes: float = 0.0  # host-DRAM KV tier per node; 0 = off

    @property
    def nodes(self) -> int:
        return self.prefill + self.decode

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def topo(self) -> str:
        return f"{self.prefill}P{self.decode}D"

    @property
    def key(self) -> str:
        """Filesystem-safe and unique per candidate (run keys start with it)."""
        raw = f"{self.policy}-{self.topo}-ep{self.ep_nodes}-t{self.dram_bytes / 1e9:g}g"
        return re.sub(r"[^a-z0-9._-]+", "_", raw.lower())


def _ep_fits(ep: int, prefill: int, decode: int) -> bool:
    """An EP group is whole nodes: it must divide both sides (0 = each side is one group)."""
    return ep == 0 or (prefill % ep == 0 and decode % ep == 0)


def enumerate_candidates(
    gpus_max: int,
    gpus_per_node: int,
    policies: Sequence[str],
    *,
    ep_nodes: Sequence[int] = (0,),
    dram_bytes: Sequence[float] = (0.0,),
    nodes_min: int = 2,
) -> list[Candidate]:
    """Every P/D split with P, D >= 1 and (P + D) x GPUs per node <= gpus_max, per policy,
    EP group size and tier size. The tier sizes > 0 go to the tier policies only and every
    other policy runs without a tier (its results would not differ)."""
    out: list[Candidate] = []
    max_nodes = gpus_max // gpus_per_node
    for policy in policies:
        tiers = [d for d in dram_bytes if d > 0] if policy in TIER_POLICIES else [0.0]
        for n in range(max(2, nodes_min), max_nodes + 1):
            for p in range(1, n):
                d = n - p
                for ep in ep_nodes:
                    if not _ep_fits(ep, p, d):
                        continue
                    out += [Candidate(policy, p, d, gpus_per_node, ep, t) for t in tiers or [0.0]]
    return out


def smallest_gpus(gpus_per_node: int) -> int:
    """The fewest GPUs any candidate needs (1P1D)."""
    return 2 * gpus_per_node


@dataclass(frozen=True, slots=True)
class Bound:
    """An upper bound on a candidate's sustainable APS, and why (docs/planner.md)."""

    aps: float  # math.inf when no resource bounds it
    binding: str  # the resource that sets it, or the SLO term that rules it out
    feasible: bool = True  # False: the SLO is missed at any rate (the idle floor)


def per_gpu(aps: float | None, c: Candidate) -> float | None:
    return None if aps is None else aps / c.gpus


def prunable(bound: Bound, c: Candidate, incumbent_per_gpu: float | None) -> str | None:
    """Why `c` need not run, or None. Safe because `bound.aps` is above any capacity the
    candidate can have: if it is below the best measured capacity per GPU, c cannot beat it
    (a tie cannot beat it either)."""
    if not bound.feasible:
        return f"slo: {bound.binding}"
    if incumbent_per_gpu is not None and bound.aps / c.gpus <= incumbent_per_gpu:
        return f"bound {bound.aps / c.gpus:.4g} APS/GPU <= best {incumbent_per_gpu:.4g}"
    return None


def by_bound(cands: Iterable[Candidate], bounds: dict[str, Bound]) -> list[Candidate]:
    """Best bound per GPU first; ties: fewer GPUs, then the key (a stable order)."""
    return sorted(cands, key=lambda c: (-bounds[c.key].aps / c.gpus, c.gpus, c.key))


@dataclass(frozen=True, slots=True)
class Measured:
    candidate: Candidate
    aps: float | None  # largest APS meeting the SLO (None: none did)
    binding: str = ""  # the bound that binds in the last passing probe's report
    jct_s: float | None = None  # offline JCT, when asked


def rank(rows: Iterable[Measured]) -> list[Measured]:
    """Most APS per GPU first; ties: fewer GPUs, then the key; no capacity last."""

    def order(m: Measured) -> tuple[float, int, str]:
        value = per_gpu(m.aps, m.candidate)
        return (-(value if value is not None else -1.0), m.candidate.gpus, m.candidate.key)

    return sorted(rows, key=order)


def pareto(rows: Iterable[Measured]) -> list[Measured]:
    """The front of (fewer GPUs, more APS): no other candidate has at most as many GPUs and
    at least as much APS with one of them strictly better. Sorted by GPUs."""
    pts = [m for m in rows if m.aps is not None and m.aps > 0]
    front = []
    for m in pts:
        assert m.aps is not None
        dominated = any(
            o.aps is not None
            and o.candidate.gpus <= m.candidate.gpus
            and o.aps >= m.aps
            and (o.candidate.gpus < m.candidate.gpus or o.aps > m.aps)
            for o in pts
        )
        if not dominated:
            front.append(m)
    return sorted(front, key=lambda m: (m.candidate.gpus, m.aps or 0.0))
