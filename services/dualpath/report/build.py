"""Turn a finished run into the report dict (schema `dualpath.report/v1`).

Every time in the report is emulated seconds. The contract keys are listed in
docs/report.md; extra keys may be added, never removed or renamed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dualpath import native
from dualpath.model.engines.hardware import GBPS_TO_BYTES
from dualpath.model.workload.script import Workload
from dualpath.model.workload.traces import infinite_cache_hit
from dualpath.report.bounds import ttft_stages
from dualpath.report.breakdown import ttft_breakdown, ttst_breakdown
from dualpath.report.facts import run_bounds
from dualpath.report.floor import FloorModel, floor_section
from dualpath.report.plots import WINDOW_S, snic_series
from dualpath.report.tier import tier_bytes_from_dram, tier_section
from dualpath.report.timeline import timeline

if TYPE_CHECKING:
    from dualpath.model.engines.cluster import Cluster
    from dualpath.model.links import Link

SCHEMA = "dualpath.report/v1"
SERIES_BUCKET_S = 1.0  # the fabric records link bytes per second of emulated time
BALANCE_WINDOW_S = 10.0  # "a small time window" for storage-NIC max/avg (paper Fig. 13)
LOADED_FRACTION = 0.8  # balance ratios lose meaning as the run drains (paper §7.5)
EARLY_FRACTION = 0.05  # attention max/avg is reported over the first 5% (paper Fig. 14)


def dist(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "n": 0}
    a = np.asarray(values, dtype=float)
    # 101 points (0th..100th percentile) for CDF plots without shipping every sample; one
    # call sorts once, and its 50th, 90th and 99th are the p50, p90 and p99
    q = np.percentile(a, np.arange(101))
    return {
        "mean": float(a.mean()),
        "p50": float(q[50]),
        "p90": float(q[90]),
        "p99": float(q[99]),
        "n": len(values),
        "quantiles": [round(float(x), 6) for x in q],
    }


def _latency(cluster: Cluster) -> dict[str, Any]:
    # By column, vectorized: 48P96D has 5.2 M turns, and a Python loop over them was a few
    # per cent of a compiled run. Same floats as a loop: the elementwise operations are the
    # scalar ones, and the pooled decode time is a running sum in row order (cumsum).
    log = cluster.metrics.requests
    arrival, t_first, t_second, t_last = (
        np.asarray(log.column(k), dtype=np.float64)
        for k in ("arrival", "t_first", "t_second", "t_last")
    )
    gen = np.asarray(log.column("gen"), dtype=np.int64)
    two, three = gen >= 2, gen >= 3
    decoding = np.cumsum(t_last[two] - t_first[two])
    gaps = int((gen[two] - 1).sum())
    return {
        "ttft_s": dist(t_first - arrival),
        "ttst_s": dist(t_second[two] - t_first[two]),
        "tpot_s": dist((t_last[three] - t_second[three]) / (gen[three] - 2)),
        # every gap after a first token, pooled over the turns: a serving benchmark's mean
        # ITL (vLLM's `bench serve`), which long outputs dominate as they do its average
        "itl_mean_s": float(decoding[-1]) / gaps if gaps else 0.0,
    }


def _windowed(link: Link, bucket_s: float, window_s: float, n_windows: int) -> np.ndarray:
    per = max(1, round(window_s / bucket_s))
    series = np.zeros(n_windows * per)
    raw = link.series(bucket_s)[: len(series)]
    series[: len(raw)] = raw
    out: np.ndarray = series.reshape(n_windows, per).sum(axis=1)
    return out


def _snic(cluster: Cluster, jct: float) -> dict[str, Any]:
    per_node: dict[str, Any] = {}
    for name, node in cluster.hw.nodes.items():
        per_node[name] = {
            "read_util": node.snic_rx.utilization(jct),
            "write_util": node.snic_tx.utilization(jct),
            "bytes_read": node.snic_rx.bytes_total,
            "bytes_written": node.snic_tx.bytes_total,
        }
    n_windows = max(1, int(jct * LOADED_FRACTION / BALANCE_WINDOW_S))
    rows = np.array(
        [
            _windowed(n.snic_rx, SERIES_BUCKET_S, BALANCE_WINDOW_S, n_windows)
            for n in cluster.hw.nodes.values()
        ]
    )
    avg = rows.mean(axis=0)
    mask = avg > 0
    ratios = rows.max(axis=0)[mask] / avg[mask]
    return {
        "per_node": per_node,
        "balance_max_over_avg": float(ratios.mean()) if ratios.size else 0.0,
        "balance_window_s": BALANCE_WINDOW_S,
        "series_window_s": WINDOW_S,
        "series_gbps": snic_series(cluster, SERIES_BUCKET_S, jct),
    }


def _cnic(cluster: Cluster, jct: float) -> dict[str, Any]:
    by_vl: dict[str, float] = {}
    capacity = 0.0
    for gpu in cluster.hw.gpus.values():
        for link in (gpu.cnic_rx, gpu.cnic_tx):
            capacity += link.rate * jct
            for vl, nbytes in link.bytes_by_vl.items():
                by_vl[str(vl)] = by_vl.get(str(vl), 0.0) + nbytes
    util = {vl: (b / capacity if capacity else 0.0) for vl, b in sorted(by_vl.items())}
    # The busiest single CNIC direction, over all VLs and per VL (bottleneck-free range).
    max_util, max_by_vl = 0.0, dict.fromkeys(util, 0.0)
    for gpu in cluster.hw.gpus.values():
        for link in (gpu.cnic_rx, gpu.cnic_tx):
            cap = link.rate * jct
            if cap <= 0:
                continue
            max_util = max(max_util, link.bytes_total / cap)
            for vl, nbytes in link.bytes_by_vl.items():
                max_by_vl[str(vl)] = max(max_by_vl.get(str(vl), 0.0), nbytes / cap)
    return {
        "bytes_by_vl": dict(sorted(by_vl.items())),
        "util_by_vl": util,
        "max_util": max_util,
        "max_util_by_vl": dict(sorted(max_by_vl.items())),
    }


def _dram(cluster: Cluster, jct: float) -> dict[str, Any]:
    """Per-node host DRAM (half-duplex: reads and writes share the rate)."""
    per_node = {
        name: {
            "util": node.dram.bytes_total / (node.dram.rate * jct) if jct > 0 else 0.0,
            "bytes": node.dram.bytes_total,
        }
        for name, node in cluster.hw.nodes.items()
    }
    return {
        "per_node": per_node,
        "max_util": max((n["util"] for n in per_node.values()), default=0.0),
    }


def _gpu(cluster: Cluster, jct: float) -> dict[str, Any]:
    m = cluster.metrics
    pe = [e.engine_id for u in cluster.prefill_units for e in u.engines]
    de = [e.engine_id for u in cluster.decode_units for e in u.engines]

    def busy(ids: list[str]) -> float:
        return sum(m.busy_of(i) for i in ids) / (len(ids) * jct) if jct > 0 else 0.0

    early = [r for t, r in m.attention_balance if t <= EARLY_FRACTION * jct]
    return {
        "prefill_busy": busy(pe),
        "decode_busy": busy(de),
        "attention_balance_max_over_avg": float(np.mean(early)) if early else 0.0,
        "attention_balance_all_run": float(np.mean([r for _, r in m.attention_balance]))
        if m.attention_balance
        else 0.0,
        "forwards": m.forwards,
        "decode_chunks": m.decode_chunks,
    }


def _storage(cluster: Cluster, jct: float) -> dict[str, Any]:
    hw = cluster.hw
    targets = {t.name: t.utilization(jct) for t in hw.targets}
    return {
        "read_util": (
            sum(t.bytes_total for t in hw.targets) / (hw.storage_read.rate * jct)
            if hw.targets and jct > 0
            else hw.storage_read.utilization(jct)
        ),
        "write_util": hw.storage_write.utilization(jct),
        "target_read_util": targets,
        "target_max_over_avg": (
            max(targets.values()) / (sum(targets.values()) / len(targets))
            if targets and sum(targets.values()) > 0
            else 0.0
        ),
    }


def _tokens(cluster: Cluster) -> dict[str, float]:
    reqs = cluster.metrics.requests  # by column: no record built per row
    hit = sum(reqs.column("hit"))
    prompt = sum(reqs.column("prompt"))
    return {
        "hit": hit,
        "miss": prompt - hit,
        "generated": sum(reqs.column("gen")),
        "hit_rate": hit / prompt if prompt else 0.0,
    }


def _integrity(cluster: Cluster) -> dict[str, Any]:
    i = cluster.metrics.integrity
    out: dict[str, Any] = {
        "blocks_read": i.blocks_read,
        "blocks_persisted": i.blocks_persisted,
        "blocks_lost": i.blocks_lost,
        "blocks_corrupted": i.blocks_corrupted,
        "bytes_from_storage": i.bytes_from_storage,
        "bytes_to_prefill_hbm": i.bytes_to_prefill_hbm,
        "bytes_reloaded_for_chunks": i.bytes_reloaded,
        "bytes_persisted": i.bytes_persisted,
        # writes that overtook an earlier one of their session and wait for it to land
        "blocks_parked_at_end": cluster.scheduler.ctx.store.parked_blocks(),
    }
    # with the DRAM tier on, part of the hit comes from DRAM instead (0 with it off)
    read = i.bytes_from_storage + tier_bytes_from_dram(cluster)
    out["conservation_ok"] = (
        abs(read - i.bytes_to_prefill_hbm) <= 1e-6 * max(1.0, read)
        and i.blocks_lost == 0
        and i.blocks_corrupted == 0
    )
    return out


def _jct_floor(cluster: Cluster, jct: float, workload: Workload) -> dict[str, Any]:
    """`jct_floor_s`, `jct_floor_bound`, `jct_floor` (report/floor.py) of an offline run
    of `workload`'s scripts."""
    sc = cluster.scenario
    model = FloorModel(
        cluster.prefill_roofline,
        cluster.decode_roofline,
        sc.engine.block_tokens,
        sc.hardware.cnic_gbps * GBPS_TO_BYTES,
        sc.topology.gpus_per_node,
    )
    open_loop = sc.workload.replay == "open-loop"
    return floor_section(model, workload, cluster.metrics.requests, jct, open_loop)


def build_report(cluster: Cluster, jct: float, wall_s: float, workload: Workload) -> dict[str, Any]:
    """The report of `cluster`, which ran `workload` (the run's own scripts: never rebuilt)."""
    m = cluster.metrics
    sc = cluster.scenario
    reqs = m.requests
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": sc.model_dump(mode="json"),
        "policy": {
            "name": cluster.policy.name,
            "layerwise": cluster.policy.layerwise,
            "dual_path": cluster.policy.dual_path,
            "oracle": cluster.policy.oracle,
            "alpha_tokens": cluster.limits.alpha,
            "beta_tokens": cluster.limits.beta,
            "compute_quota_s": cluster.limits.compute_quota_s,
        },
        "mode": sc.workload.mode,
        "runtime": {
            "kind": "virtual",
            "dilation": None,  # virtual time: no dilation, every event at its exact time
            "lag_p99_s": 0.0,  # virtual time never lags: every event runs at its emulated time
            "wall_s": wall_s,
            "emulated_per_wall": jct / wall_s if wall_s > 0 else 0.0,
            "flows": cluster.hw.fabric.flows_started,
            "compiled": native.active(),  # DUALPATH_NATIVE=1 (docs/native.md): same results
            # What the run's CPU went on, counted: noise-free, so two runs' work per turn can
            # be compared where their CPU times drift with the host (docs/native.md).
            "reshares": cluster.hw.fabric.relaxes,
            "link_recomputations": cluster.hw.fabric.relax_steps,
        },
        "jct_s": jct,
        "faults": {"schedule": list(sc.faults.schedule), "events": list(cluster.faults.log)},
        "requests": {
            "completed": len(reqs),
            "failed": m.failed,
            "per_s": len(reqs) / jct if jct > 0 else 0.0,
        },
        "tokens": _tokens(cluster),
        "latency": _latency(cluster),
        "read_path": dict(m.read_path),
        "read_bytes_by_path": dict(m.bytes_by_path),
        "snic": _snic(cluster, jct),
        "cnic": _cnic(cluster, jct),
        "dram": _dram(cluster, jct),
        "gpu": _gpu(cluster, jct),
        "integrity": _integrity(cluster),
        "storage": _storage(cluster, jct),
    }
    # Keys added after the contract's first version go last, so existing ones keep their order.
    if sc.workload.mode == "offline":
        report.update(_jct_floor(cluster, jct, workload))
    report["ttft_breakdown"] = ttft_breakdown(reqs)
    report["timeline"] = timeline(reqs)
    tier = tier_section(cluster)
    if tier is not None:  # only with the tier on: a run without it is as before
        report["tier"] = tier
    report["bounds"] = run_bounds(cluster, len(workload.scripts), jct, report.get("jct_floor_s"))
    if sc.workload.mode == "online":
        aps = sc.online.aps
        report["bounds"]["ttft_stages"] = ttft_stages(
            report["ttft_breakdown"], cluster.policy.name, sc.model, aps
        )
    report["ttst_breakdown"] = ttst_breakdown(reqs)
    return report


def workload_section(workload: Workload) -> dict[str, Any]:
    """What was replayed; for a trace also its own unbounded-cache hit figure (the ids'
    longest known prefixes), to set beside the hit the emulated store really gave."""
    out: dict[str, Any] = {
        "source": workload.source,
        "description": workload.description,
        "sessions": len(workload.scripts),
        "turns": workload.requests,
        "shared_prefix_forks": len(workload.forks),
    }
    if workload.block_tokens:
        out["trace_hit_rate"] = infinite_cache_hit(workload).token_ratio
    return out
