"""Gather every service's statistics over gRPC and build the run's report with the same
builder (and contract) as `dualpath sim`."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import redis.asyncio as aioredis

from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.workload.script import Workload
from dualpath.report.build import build_report
from dualpath.report.history import check_history
from dualpath.rpc.v1 import kv_pb2, kv_pb2_grpc, node_pb2_grpc, scheduler_pb2_grpc
from dualpath.runtimes.process.control import EventLog
from dualpath.runtimes.process.serving.peers import bearer_interceptors
from dualpath.runtimes.process.serving.stats import merge_into, unpack
from dualpath.runtimes.process.serving.world import build_world


async def gather_stats(
    addrs: dict[str, str], timeout_s: float = 30.0, token: str | None = None
) -> list[dict[str, Any]]:
    """Every service's Stats; with the run's token when its services require one."""
    interceptors = bearer_interceptors(token) if token else None

    async def one(name: str, addr: str) -> dict[str, Any]:
        async with grpc.aio.insecure_channel(addr, interceptors=interceptors) as ch:
            stub: Any
            if name == "storage":
                stub = kv_pb2_grpc.BlockStoreStub(ch)
            elif name == "scheduler":
                stub = scheduler_pb2_grpc.SchedulerStub(ch)
            else:
                stub = node_pb2_grpc.NodeStub(ch)
            reply = await stub.Stats(kv_pb2.StatsRequest(), timeout=timeout_s)
            return unpack(reply.msgpack)

    return list(await asyncio.gather(*(one(n, a) for n, a in sorted(addrs.items()))))


async def read_history(redis_url: str, run_id: str) -> dict[str, Any]:
    """Check the run's event history (every service's msgpack records in Redis)."""
    r = aioredis.Redis.from_url(redis_url)
    try:
        return check_history(await EventLog(r, run_id, "launcher").read_all())
    finally:
        await r.aclose()


def process_report(
    sc: Scenario,
    workload: Workload,
    services: list[dict[str, Any]],
    t_start: float,
    t_end: float,
    wall_s: float,
    extra_runtime: dict[str, Any],
) -> dict[str, Any]:
    """Rebuild the scenario's cluster idle on a virtual clock at t = 0, load the services'
    shares into it (times shifted so the workload starts at 0) and build the report of
    `workload` (the scripts the load replayed)."""

    async def build(clock: VirtualClock) -> dict[str, Any]:
        world = build_world(sc, clock, "report", workload=workload)
        merge_into(world.cluster, services, t_start)
        jct = max(t_end - t_start, 1e-9)
        world.cluster.metrics.end_time = jct
        report = build_report(world.cluster, jct, wall_s, workload)
        storage = next(s for s in services if s["service"] == "storage")
        report["integrity"]["blocks_parked_at_end"] = storage["store"]["parked_blocks"]
        if "tier" in report:  # planned tier blocks a node no longer held (node_tier.py)
            tiers = [s["tier"] for s in services if "tier" in s]
            report["tier"]["shortfall_blocks"] = sum(t["shortfall"] for t in tiers)
        report["runtime"] = _runtime(services, jct, wall_s, extra_runtime)
        return report

    result: dict[str, Any] = run_virtual(build)
    return result


def _runtime(
    services: list[dict[str, Any]], jct: float, wall_s: float, extra: dict[str, Any]
) -> dict[str, Any]:
    lag = {s["service"]: s["lag"] for s in services}
    worst = max((v["p99_s"] for v in lag.values()), default=0.0)
    return {
        "kind": "process",
        "dilation": services[0]["dilation"],
        "lag_p99_s": worst,
        "lag_max_s": max((v["max_s"] for v in lag.values()), default=0.0),
        "lag_by_service": lag,
        "wall_s": wall_s,
        "emulated_per_wall": jct / wall_s if wall_s > 0 else 0.0,
        "flows": None,
        "reshares": None,
        "link_recomputations": None,
        "remote_charges": sum(s.get("remote_charges", 0) for s in services),
        "payload_bytes_verified": sum(s.get("payload_bytes_verified", 0) for s in services),
        "storage_reads": _storage_reads(services),
        "forward_reports": next(
            (s.get("forward_reports", 0) for s in services if s["service"] == "scheduler"), 0
        ),
        "resilience": _resilience(services),
        "services": sorted(lag),
        "stage_means_s": next(
            (s.get("stages", {}) for s in services if s["service"] == "scheduler"), {}
        ),
        **extra,
    }


def _resilience(services: list[dict[str, Any]]) -> dict[str, Any]:
    """What faults cost this run: turns placed again, persists the store never took, DRAM
    reservations given back by abandoned attempts (all 0 in a healthy run)."""
    sched = next((s for s in services if s["service"] == "scheduler"), {})
    return {
        "turns_replaced": sched.get("turns_replaced", 0),
        "turns_cancelled": sched.get("turns_cancelled", 0),
        "nodes_lost_at_end": sched.get("nodes_lost", []),
        "persists_failed": sum(s.get("persists_failed", 0) for s in services),
        "persists_resent": sum(s.get("persists_resent", 0) for s in services),
        "charges_lost": sum(s.get("charges_lost", 0) for s in services),
        "buffer_released_bytes": sum(s.get("buffer_released_bytes", 0.0) for s in services),
    }


def _storage_reads(services: list[dict[str, Any]]) -> dict[str, int]:
    """The storage service's Read calls and their blocks (a DRAM tier hit is not one)."""
    store: dict[str, Any] = next((s["store"] for s in services if s["service"] == "storage"), {})
    return {"calls": store.get("reads", 0), "blocks": store.get("read_blocks", 0)}
