"""What report/bounds.py needs of a built cluster and its policy, and the call itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dualpath.model.engines.hardware import GBPS_TO_BYTES
from dualpath.report.bounds import ClusterFacts, Traffic, bounds_section

if TYPE_CHECKING:
    from dualpath.model.engines.cluster import Cluster


def cluster_facts(cluster: Cluster, sessions: int) -> ClusterFacts:
    """What report/bounds.py needs of the built cluster and its policy."""
    sc, hw, policy = cluster.scenario, cluster.hw, cluster.policy
    pe = [e for g in cluster.prefill_groups for e in g]
    de = [e for g in cluster.decode_groups for e in g]
    node = next(iter(hw.nodes.values()))
    return ClusterFacts(
        pe_gpus=len(pe),
        de_gpus=len(de),
        pe_nodes=sc.topology.prefill_nodes,
        de_nodes=sc.topology.decode_nodes,
        kv_hbm_pe=hw.gpu_of(pe[0]).kv_hbm if pe else 0.0,
        kv_hbm_de=hw.gpu_of(de[0]).kv_hbm if de else 0.0,
        snic_read_bytes_s=node.snic_rx.rate,
        cnic_bytes_s=sc.hardware.cnic_gbps * GBPS_TO_BYTES,
        layerwise=policy.layerwise,
        compute_quota_s=cluster.limits.compute_quota_s if policy.compute_quota else None,
        max_running_pe=sc.engine.max_running_prefill,
        max_running_de=sc.engine.max_running_decode,
        sessions=sessions,
        io_bypassed=policy.oracle,
    )


def run_bounds(cluster: Cluster, sessions: int, jct: float, floor: float | None) -> dict[str, Any]:
    """The report's `bounds` of a finished run (`sessions`: the workload's scripts)."""
    m = cluster.metrics
    cnic = sum(g.cnic_rx.bytes_total + g.cnic_tx.bytes_total for g in cluster.hw.gpus.values())
    traffic = Traffic(dict(m.bytes_by_path), cnic)
    facts = cluster_facts(cluster, sessions)
    rl = cluster.prefill_roofline, cluster.decode_roofline
    return bounds_section(*rl, facts, m.requests, traffic, jct, floor)
