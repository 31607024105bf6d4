"""Composition root of both runtimes: one Scenario -> one wired `Cluster`.

Everything is constructed here and injected; nothing below builds its own collaborators. What
a runtime needs is handed out, never taken apart: the `Cluster`'s contexts, groups and unit
factory (model/engines/cluster.py), and the scheduler class to build (`scheduler=`: the process
runtime's scheduler process passes its `RemoteScheduler`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dualpath.model.blocks import BlockStore, ChainRegistry, full_block_bytes
from dualpath.model.blocks.tier import TierSet
from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import Clock
from dualpath.model.engines.cluster import Cluster, make_units
from dualpath.model.engines.context import EngineContext, FaultPlan
from dualpath.model.engines.decode import DecodeUnit
from dualpath.model.engines.faults import VirtualFaults
from dualpath.model.engines.hardware import GBPS_TO_BYTES, GBS_TO_BYTES, Hardware, add_gpu, add_node
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.entities.metrics import Metrics, TierStats
from dualpath.model.entities.request import EngineState, GroupLoad, NodeState, ReadPath
from dualpath.model.faults.spec import parse_all
from dualpath.model.links import Fabric, VlArbitration
from dualpath.model.policies.base import Limits
from dualpath.model.policies.registry import default_registry
from dualpath.model.roofline import Roofline, load_gpu, load_model
from dualpath.report.build import SERIES_BUCKET_S

# (context, prefill groups, decode groups) -> the global scheduler of the run
SchedulerFactory = Callable[
    [EngineContext, list[list[EngineState]], list[list[EngineState]]], GlobalScheduler
]


class TopologyError(ValueError):
    """The scenario cannot run (e.g. weights do not fit in HBM)."""


def _groups(n_nodes: int, group_nodes: int) -> list[list[int]]:
    size = group_nodes or n_nodes
    if n_nodes % size:
        raise TopologyError(
            f"topology: {n_nodes} nodes cannot be split into groups of {size} whole nodes; "
            "set prefill_group_nodes/decode_group_nodes to a divisor of the node count"
        )
    return [list(range(i, i + size)) for i in range(0, n_nodes, size)]


def _layer_groups(layers: int, per_group: int, layerwise: bool) -> list[int]:
    """Layers per emulated step. The last step is a single layer so that only one layer's
    KV is still in flight to the DE when the forward's compute ends, as per layer."""
    if not layerwise:
        return [layers]  # Basic: the whole prompt's KV is loaded before the forward
    if layers <= 1 or per_group == 1:
        return [1] * layers
    full, rest = divmod(layers - 1, per_group)
    return [*([per_group] * full), *([rest] if rest else []), 1]


def _build_side(
    sc: Scenario, hw: Hardware, role: str, n_nodes: int, group_nodes: int, kv_hbm: float
) -> list[list[EngineState]]:
    h, g = sc.hardware, sc.topology.gpus_per_node
    arb = VlArbitration(
        high=dict(sc.vl.high),
        low=dict(sc.vl.low),
        high_limit=sc.vl.high_limit,
        mtu_bytes=sc.vl.mtu_bytes,
        isolation=sc.vl.isolation,
    )
    groups: list[list[EngineState]] = []
    for gi, node_ids in enumerate(_groups(n_nodes, group_nodes)):
        engines: list[EngineState] = []
        for n in node_ids:
            node = NodeState(name=f"{role}{n}", role=role, index=n)
            add_node(
                hw,
                node,
                h.snic_gbps * GBPS_TO_BYTES,
                h.dram_gbs * GBS_TO_BYTES,
                h.dram_buffer_gb * 1e9,
                read_efficiency=sc.fidelity.storage_read_efficiency,
            )
            for gpu in range(g):
                e = EngineState(f"{role}{n}.gpu{gpu}", n * g + gpu, node, gi, gpu, free_hbm=kv_hbm)
                add_gpu(hw, e, h.cnic_gbps * GBPS_TO_BYTES, arb, kv_hbm)
                engines.append(e)
        load = GroupLoad(len(engines))  # every engine starts with tok_e = 0
        for e in engines:
            e.load = load
        groups.append(engines)
    return groups


def _kv_hbm(sc: Scenario, rl: Roofline, hbm_gb: float, side: str) -> float:
    weights = rl.weight_bytes_per_gpu()
    reserve_gb = max(sc.hardware.hbm_reserve_gb, sc.hardware.hbm_reserve_fraction * hbm_gb)
    free = hbm_gb * 1e9 - weights - reserve_gb * 1e9
    if free <= 0:
        raise TopologyError(
            f"topology: {sc.model} weights need {weights / 1e9:.1f} GB per {side} GPU but "
            f"{sc.gpu} has {hbm_gb:.0f} GB HBM ({reserve_gb:.0f} GB reserved); "
            f"use more {side} nodes (larger EP group) or a GPU with more HBM"
        )
    return free


def check_topology(sc: Scenario) -> None:
    """Raise the TopologyError `build_cluster` would, without building anything: engine
    groups of whole nodes, and weights that leave room for KV in HBM. The CLI calls it before
    any process starts, so the process runtime refuses such a scenario up front."""
    model, gpu = load_model(sc.model), load_gpu(sc.gpu)
    t = sc.topology
    hbm_gb = sc.hardware.hbm_gb or gpu.hbm_gb
    for side, n_nodes, group_nodes in (
        ("prefill", t.prefill_nodes, t.prefill_group_nodes),
        ("decode", t.decode_nodes, t.decode_group_nodes),
    ):
        _groups(n_nodes, group_nodes)
        rl = Roofline(model, gpu, (group_nodes or n_nodes) * t.gpus_per_node)
        _kv_hbm(sc, rl, hbm_gb, side)


def derive_limits(sc: Scenario, rl: Roofline, mean_context: int, mean_append: int) -> Limits:
    """α and β from the profiles (paper A.4), unless the scenario overrides them."""
    kv_token = rl.kv_bytes_per_token
    snic_bps = sc.hardware.snic_gbps * GBPS_TO_BYTES
    alpha = sc.policy.alpha_tokens or int(snic_bps * sc.policy.alpha_s / kv_token)
    # tok_e counts every prompt token of a PE's requests (see policies.base.prefill_tokens),
    # so β is in the same unit: the prompt tokens of the requests one GPU prefills in β_s.
    append = max(1, mean_append)
    requests_per_s = rl.tokens_per_second(mean_context, append) / append
    beta = sc.policy.beta_tokens or int(requests_per_s * (mean_context + append) * sc.policy.beta_s)
    quota = sc.engine.compute_quota_ms / 1000
    return Limits(
        alpha,
        beta,
        quota,
        kv_token,
        sc.policy.z_factor,
        ReadPath(sc.policy.path_tie),
        sc.engine.max_running_prefill or 0,
        sc.engine.max_running_decode or 0,
    )


def _tier(sc: Scenario, nodes: list[str], block_bytes: int) -> TierSet | None:
    """Every node's DRAM tier, in whole Full Blocks; None when off (0 bytes, the default)."""
    t = sc.tier
    if t.dram_bytes_per_node <= 0:
        return None
    capacity = int(t.dram_bytes_per_node // block_bytes)
    return TierSet(
        nodes, capacity, t.eviction, remote=t.remote_hits, block_tokens=sc.engine.block_tokens
    )


def build_cluster(
    sc: Scenario,
    clock: Clock,
    mean_context: int,
    mean_append: int,
    *,
    scheduler: SchedulerFactory = GlobalScheduler,
) -> Cluster:
    model, gpu = load_model(sc.model), load_gpu(sc.gpu)
    t = sc.topology
    pe_group_gpus = (t.prefill_group_nodes or t.prefill_nodes) * t.gpus_per_node
    de_group_gpus = (t.decode_group_nodes or t.decode_nodes) * t.gpus_per_node
    kv_indexer = sc.fidelity.kv_indexer_cached
    pe_rl = Roofline(model, gpu, pe_group_gpus, kv_indexer=kv_indexer)
    de_rl = Roofline(model, gpu, de_group_gpus, kv_indexer=kv_indexer)
    hbm_gb = sc.hardware.hbm_gb or gpu.hbm_gb
    total_snic = (t.prefill_nodes + t.decode_nodes) * sc.hardware.snic_gbps * GBPS_TO_BYTES
    storage_bps = (sc.hardware.storage_gbs or 1.5 * total_snic / GBS_TO_BYTES) * GBS_TO_BYTES
    fabric = Fabric(clock, bucket_s=SERIES_BUCKET_S)
    hw = Hardware(
        fabric,
        fabric.add_link("storage.read", storage_bps),
        fabric.add_link("storage.write", storage_bps),
    )
    for t_i in range(sc.hardware.storage_targets):
        hw.targets.append(
            fabric.add_link(f"storage.target{t_i}", storage_bps / sc.hardware.storage_targets)
        )
    pe_groups = _build_side(
        sc,
        hw,
        "prefill",
        t.prefill_nodes,
        t.prefill_group_nodes,
        _kv_hbm(sc, pe_rl, hbm_gb, "prefill"),
    )
    de_groups = _build_side(
        sc, hw, "decode", t.decode_nodes, t.decode_group_nodes, _kv_hbm(sc, de_rl, hbm_gb, "decode")
    )
    limits = derive_limits(sc, pe_rl, mean_context, mean_append)
    policy = default_registry().create(sc.policy.name, limits, sc.seed)
    metrics = Metrics()
    chains = ChainRegistry(salt=sc.seed)
    fbb = full_block_bytes(pe_rl.kv_bytes_per_token_layer, pe_rl.layers, sc.engine.block_tokens)
    tier = _tier(sc, list(hw.nodes), fbb)
    if tier is not None:
        policy.tier = tier
        metrics.tier = TierStats()
    pe_ctx = EngineContext(
        clock=clock,
        hw=hw,
        roofline=pe_rl,
        store=BlockStore(chains),
        chains=chains,
        metrics=metrics,
        policy=policy,
        engine=sc.engine,
        vl=sc.vl,
        layer_groups=_layer_groups(model.layers, sc.engine.layer_group, policy.layerwise),
        full_block_bytes=fbb,
        kv_token_layer=pe_rl.kv_bytes_per_token_layer,
        kv_token=pe_rl.kv_bytes_per_token,
        faults=FaultPlan(sc.faults.corrupt_blocks),
        gpus_per_node=t.gpus_per_node,
        de_buffer_after_pe_read=sc.fidelity.de_buffer_for_pe_reads == "after-read",
        handover_per_forward=sc.fidelity.handover == "per-forward",
        tier=tier,
    )
    de_ctx = dataclasses.replace(pe_ctx, roofline=de_rl)
    sched = scheduler(pe_ctx, pe_groups, de_groups)
    moe = pe_rl.moe_layers > 0  # EP: the group's GPUs step together
    pe_units = make_units(
        pe_groups, moe, lambda es: PrefillUnit(pe_ctx, es, sched.on_prefilled, sched.on_pe_released)
    )
    de_units = make_units(de_groups, moe, lambda es: DecodeUnit(de_ctx, es, sched.on_decoded))
    for u in pe_units:
        sched.pe_unit.update({e.engine_id: u for e in u.engines})
        if sc.engine.fetch_mode == "per-forward":
            u.on_forward_end = sched.on_pe_forward_end
    for d in de_units:
        sched.de_unit.update({e.engine_id: d for e in d.engines})
    # Link faults at their emulated times, on this clock: on processes each node applies
    # them to the links it owns (kill, pause and redis-drop are the launcher's: signals).
    faults = VirtualFaults(hw, clock)
    faults.schedule(parse_all(sc.faults.schedule))
    return Cluster(
        scenario=sc,
        clock=clock,
        hw=hw,
        metrics=metrics,
        policy=policy,
        scheduler=sched,
        prefill_units=pe_units,
        decode_units=de_units,
        prefill_roofline=pe_rl,
        decode_roofline=de_rl,
        limits=limits,
        faults=faults,
        prefill_ctx=pe_ctx,
        decode_ctx=de_ctx,
        prefill_groups=pe_groups,
        decode_groups=de_groups,
    )
