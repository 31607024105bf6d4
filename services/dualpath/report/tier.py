"""The report's `tier` section (docs/tier.md, docs/report.md): where hit tokens came from
with the host-DRAM tier on, and what the tiers held and evicted. Absent when the tier is off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dualpath.model.engines.cluster import Cluster


def tier_bytes_from_dram(cluster: Cluster) -> float:
    """Hit bytes the tiers served (local + remote DRAM): 0 with the tier off."""
    stats = cluster.metrics.tier
    return stats.bytes["local_dram"] + stats.bytes["remote_dram"] if stats is not None else 0.0


def tier_section(cluster: Cluster) -> dict[str, Any] | None:
    stats, tiers = cluster.metrics.tier, cluster.prefill_ctx.tier
    if stats is None or tiers is None:
        return None
    sc = cluster.scenario.tier
    fbb = cluster.prefill_ctx.full_block_bytes
    per_node = {
        name: {
            "used_bytes": t.used * fbb,
            "peak_bytes": t.peak * fbb,
            "sessions": len(t.runs),
            "inserted_blocks": t.inserted_blocks,
            "evicted_blocks": t.evicted_blocks,
            "evicted_sessions": t.evicted_sessions,
        }
        for name, t in tiers.tiers.items()
    }
    total = sum(stats.tokens.values())
    return {
        "dram_bytes_per_node": sc.dram_bytes_per_node,
        "capacity_blocks_per_node": next(iter(tiers.tiers.values())).capacity,
        "eviction": sc.eviction,
        "remote_hits": sc.remote_hits,
        "hit_tokens": dict(stats.tokens),
        "hit_bytes": dict(stats.bytes),
        "hit_share": {k: (v / total if total else 0.0) for k, v in stats.tokens.items()},
        "evicted_blocks": sum(n["evicted_blocks"] for n in per_node.values()),
        "evicted_sessions": sum(n["evicted_sessions"] for n in per_node.values()),
        "per_node": per_node,
    }
