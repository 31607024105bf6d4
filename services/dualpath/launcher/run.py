"""`dualpath up` (serve until Ctrl-C) and `dualpath run` (up + demo workload + report + down)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dualpath.config.settings import Scenario
from dualpath.core.clock import RealClock
from dualpath.launcher.collect import gather_stats, process_report, read_history
from dualpath.launcher.local import LocalCluster, UpOptions, local_cluster
from dualpath.launcher.workload import drive_agents
from dualpath.runtime.sim import make_trajectories

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    report: dict[str, Any]
    cluster_wall_s: float  # start + workload + stop


def endpoints(cl: LocalCluster) -> list[tuple[str, str]]:
    rows = [
        ("OpenAI API", f"http://{cl.http_addr}/v1"),
        ("agent turns", f"http://{cl.http_addr}/v1/agent/turn"),
    ]
    rows += [(f"{m.name} gRPC", m.grpc_addr) for m in sorted(cl.members, key=lambda m: m.name)]
    rows += [
        (f"{m.name} metrics", f"http://{m.admin_addr}/metrics")
        for m in sorted(cl.members, key=lambda m: m.name)
    ]
    rows.append(("redis", cl.redis_url))
    rows.append(("logs", str(cl.group.log_dir)))
    return rows


def serve_until_signal(
    sc: Scenario, opts: UpOptions, on_ready: Callable[[LocalCluster], None]
) -> None:
    """`dualpath up`: start everything, report the endpoints, wait for Ctrl-C or SIGTERM,
    stop everything (the caller sees KeyboardInterrupt only after the cluster is down)."""
    stop = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        with local_cluster(sc, opts) as cl:
            on_ready(cl)
            while not stop:
                cl.group.check_alive()
                time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, old)


def _interrupt(_sig: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run like Ctrl-C: the cluster goes down first


def run_workload(sc: Scenario, opts: UpOptions, progress: Progress | None = None) -> RunOutcome:
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run_workload(sc, opts, progress)
    finally:
        signal.signal(signal.SIGTERM, old)


def _run_workload(sc: Scenario, opts: UpOptions, progress: Progress | None) -> RunOutcome:
    trajs = make_trajectories(sc)
    total = sum(len(t.turns) for t in trajs)
    started = time.perf_counter()
    with local_cluster(sc, opts) as cl:
        clock = RealClock(opts.dilation, epoch=cl.epoch)
        done = 0

        def on_turn() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total)

        async def main() -> tuple[float, float, list[dict[str, Any]]]:
            t_start = clock.now()
            w0 = time.perf_counter()
            await drive_agents(cl.http_addr, trajs, on_turn, opts.run_timeout_s)
            wall = time.perf_counter() - w0
            return t_start, wall, await gather_stats(cl.grpc_addrs())

        t_start, wall, services = asyncio.run(main())
        killed = cl.group.stop(opts.grace_s)  # services flush their event history on SIGTERM
        history = asyncio.run(read_history(cl.redis_url, cl.run_id))
    sched = next(s for s in services if s["service"] == "scheduler")
    t_end = max((row[9] for row in sched["metrics"]["requests"]), default=t_start)
    extra = {"cluster_wall_s": time.perf_counter() - started, "turns": done, "killed": killed}
    report = process_report(sc, services, t_start, t_end, wall, extra)
    report["history"] = history
    return RunOutcome(report, time.perf_counter() - started)
