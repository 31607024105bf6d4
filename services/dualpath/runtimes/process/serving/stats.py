"""Each service's statistics as plain data, and their merge into one report.

Every service reports the links it owns and its share of the run record (`Metrics`); the
launcher rebuilds the scenario's cluster locally, loads every service's share into it and
calls the same `build_report` as `dualpath sim` — one report contract for both runtimes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack  # type: ignore[import-untyped]

from dualpath.model.core.clock import RealClock
from dualpath.model.engines.cluster import Cluster
from dualpath.model.entities.metrics import Integrity, Metrics, RequestRecord
from dualpath.model.entities.request import Request
from dualpath.model.links import Link
from dualpath.model.links.snapshot import restore, snapshot
from dualpath.runtimes.process.serving.node_tier import restore as restore_tier
from dualpath.runtimes.process.serving.prom import lag_summary


def pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> dict[str, Any]:
    out = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(out, dict):
        raise ValueError("stats: expected a msgpack map")
    return out


def base_stats(
    name: str, clock: RealClock, links: list[Link], m: Metrics, requests: bool = False
) -> dict[str, Any]:
    """`requests`: include the finished-request records (only the scheduler's count: the
    decode engines record the same requests)."""
    return {
        "service": name,
        "now": clock.now(),
        "dilation": clock.dilation,
        "lag": lag_summary(clock),
        "links": {ln.name: snapshot(ln) for ln in links},
        "metrics": {
            "requests": list(m.requests.rows()) if requests else [],
            "failed": m.failed,
            "read_path": m.read_path,
            "bytes_by_path": m.bytes_by_path,
            "integrity": dataclasses.asdict(m.integrity),
            "busy_s": m.busy_totals(),
            "attention_balance": m.attention_balance,
            "forwards": m.forwards,
            "decode_chunks": m.decode_chunks,
            # where hit tokens came from (the scheduler counts them; docs/tier.md)
            "tier": None if m.tier is None else {"tokens": m.tier.tokens, "bytes": m.tier.bytes},
        },
    }


def merge_into(cluster: Cluster, services: list[dict[str, Any]], t0: float) -> None:
    """Load every service's links and metrics into `cluster` (built idle, from the same
    scenario), shifting times so the workload starts at t = 0 as in `dualpath sim`."""
    links = cluster.hw.fabric.links
    m = cluster.metrics
    for s in services:
        for name, snap in s["links"].items():
            restore(links[name], snap, skip_s=t0)
        _merge_metrics(m, s["metrics"], t0)
        tiers = cluster.prefill_ctx.tier
        if tiers is not None and "tier" in s:  # a node's own DRAM tier (node_tier.py)
            restore_tier(tiers.tiers[s["service"]], s["tier"])


def _merge_metrics(m: Metrics, part: dict[str, Any], t0: float) -> None:
    for row in part["requests"]:
        r = RequestRecord(*row)
        r.arrival -= t0
        r.t_first -= t0
        r.t_second -= t0
        r.t_last -= t0
        m.requests.append(r)
    m.failed += part["failed"]
    for k, v in part["read_path"].items():
        m.read_path[k] = m.read_path.get(k, 0) + v
    for k, v in part["bytes_by_path"].items():
        m.bytes_by_path[k] = m.bytes_by_path.get(k, 0.0) + v
    for f in dataclasses.fields(Integrity):
        setattr(m.integrity, f.name, getattr(m.integrity, f.name) + part["integrity"][f.name])
    for k, v in part["busy_s"].items():
        m.add_busy(k, v)
    m.attention_balance.extend((t - t0, r) for t, r in part["attention_balance"])
    m.forwards += part["forwards"]
    m.decode_chunks += part["decode_chunks"]
    tier = part.get("tier")
    if tier is not None and m.tier is not None:
        for k, v in tier["tokens"].items():
            m.tier.add(k, v, tier["bytes"][k])


class Stages:
    """Mean emulated time of each stage of a turn: where the process runtime spends it."""

    NAMES = ("queued", "read_wait", "read", "prefill", "decode")

    def __init__(self) -> None:
        self.n = 0
        self.sums = dict.fromkeys(self.NAMES, 0.0)

    def add(self, r: Request) -> None:
        self.n += 1
        parts = (
            r.t_de - r.arrival,
            r.t_read_start - r.t_de,
            r.t_read_done - r.t_read_start,
            r.t_first - r.t_read_done,
            r.t_last - r.t_first,
        )
        for k, v in zip(self.NAMES, parts, strict=True):
            self.sums[k] += v

    def means(self) -> dict[str, float]:
        return {k: v / self.n for k, v in self.sums.items()} if self.n else {}
