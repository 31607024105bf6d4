"""The compose cluster's report, built where the services are: inside a container.

    docker compose exec -T scheduler python - < scripts/containers/cluster_report.py > report.json

Run by the project image's Python on the compose network (the services are reachable there
by name, and only there). It asks every service for its statistics over gRPC with the run's
token (DUALPATH_TOKEN, which the cluster's containers have), builds the report with the same
code and contract as `dualpath run` (dualpath.runtimes.process.launcher.collect), prints it as JSON
and exits
1 when a block was lost or corrupted, 3 (naming the service) when one did not answer within
its deadline. It stops nothing: the cluster keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import grpc

from dualpath.model.config.presets import resolve
from dualpath.model.config.workload_sources import build_workload
from dualpath.rpc.v1 import kv_pb2, kv_pb2_grpc, node_pb2_grpc, scheduler_pb2_grpc
from dualpath.runtimes.process.launcher.collect import process_report
from dualpath.runtimes.process.serving.peers import make_channel
from dualpath.runtimes.process.serving.stats import unpack

# docker-compose.yml: service name -> gRPC address (every service listens on 50051).
SERVICES = ("scheduler", "storage", "prefill0", "decode0")
PRESET = "smoke"
TIMEOUT_S = 30.0


UNANSWERED = 3  # exit code: a service did not answer (worth one more try), not lost blocks


class UnansweredError(Exception):
    pass


async def stats(name: str, token: str | None) -> dict[str, Any]:
    try:
        return await _stats(name, token)
    except grpc.aio.AioRpcError as e:
        why = f"{e.code().name}: {e.details()}"
        raise UnansweredError(f"{name} did not answer Stats ({why})") from e


async def _stats(name: str, token: str | None) -> dict[str, Any]:
    async with make_channel(f"{name}:50051", token) as channel:
        stub: Any
        if name == "storage":
            stub = kv_pb2_grpc.BlockStoreStub(channel)
        elif name == "scheduler":
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
        else:
            stub = node_pb2_grpc.NodeStub(channel)
        # wait_for_ready: a name that fails to resolve once (the engine's DNS reloads when a
        # container stops) is retried until the deadline instead of failing the call
        reply = await stub.Stats(kv_pb2.StatsRequest(), timeout=TIMEOUT_S, wait_for_ready=True)
        return unpack(reply.msgpack)


async def gather(token: str | None) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(stats(n, token) for n in SERVICES)))


def main() -> int:
    token = os.environ.get("DUALPATH_TOKEN") or None
    try:
        services = asyncio.run(gather(token))
    except UnansweredError as e:
        print(f"cluster report: {e}", file=sys.stderr)
        return UNANSWERED
    sched = next(s for s in services if s["service"] == "scheduler")
    now = sched["now"]
    rows = sched["metrics"]["requests"]
    # as dualpath.runtimes.process.launcher.run.finish_run: row[6] = arrival, row[9] = last token
    t_start = min((row[6] for row in rows), default=now)
    t_end = max((row[9] for row in rows), default=t_start)
    extra = {"turns": len(rows), "collected_at_unix": time.time()}
    sc = resolve(PRESET, {}, [])
    # the scripts the load replayed: Locust builds them from the same preset (docs/loadgen.md)
    report = process_report(sc, build_workload(sc), services, t_start, t_end, 0.0, extra)
    # each service's emulated now: they share one epoch, so these agree within the
    # collection's own duration (a service that took a fresh epoch stands out here)
    report["clocks"] = {s["service"]: s["now"] for s in services}
    json.dump(report, sys.stdout, indent=1, default=str)
    integ = report["integrity"]
    lost, corrupted = integ["blocks_lost"], integ["blocks_corrupted"]
    print(
        f"cluster report: {len(rows)} turns, blocks lost {lost}, corrupted {corrupted}",
        file=sys.stderr,
    )
    return 1 if lost or corrupted else 0


if __name__ == "__main__":
    sys.exit(main())
