"""`dualpath up` (serve until Ctrl-C) and `dualpath run` (up + demo workload + report + down).

The demo workload is a headless Locust run (`dualpath.loadgen.demo.drive_agents`).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dualpath.loadgen.demo import drive_agents
from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.core.clock import RealClock
from dualpath.report.build import workload_section
from dualpath.report.schema import check_report
from dualpath.runtimes.process.launcher.collect import gather_stats, process_report, read_history
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions, local_cluster

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    report: dict[str, Any]
    cluster_wall_s: float  # start + workload + stop


def endpoints(cl: LocalCluster) -> list[tuple[str, str]]:
    rows = [
        ("OpenAI API", f"http://{cl.http_addr}/v1"),
        ("agent turns", f"http://{cl.http_addr}/v1/agent/turn"),
        ("live dashboard", f"http://{cl.http_addr}/dashboard"),
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
                cl.tick()
                time.sleep(0.1)
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
    started = time.perf_counter()
    with local_cluster(sc, opts) as cl:
        # The same agent driver as `dualpath load`: a headless Locust subprocess on the
        # cluster's own resolved scenario file (so it replays exactly these scripts).
        result = drive_agents(
            cl.http_addr,
            opts.run_dir / "scenario.yaml",
            opts.run_dir / "locust",
            opts.dilation,
            progress,
            opts.run_timeout_s,
            check=cl.tick,
            tolerate_failures=bool(sc.faults.schedule),
        )
        report = finish_run(sc, cl, started, result.wall_s, result.turns)
    return RunOutcome(report, time.perf_counter() - started)


def finish_run(
    sc: Scenario, cl: LocalCluster, started: float, wall_s: float, turns: int
) -> dict[str, Any]:
    """Gather every service's statistics, stop the services (they flush their event history
    on SIGTERM), check the history and build the report (the contract of `dualpath sim`).
    `started`: perf_counter() before the cluster started; `wall_s`: the workload's wall time."""
    t_now = RealClock(cl.opts.dilation, epoch=cl.epoch).now()
    services = asyncio.run(gather_stats(cl.settle(), token=cl.opts.token))
    killed = cl.group.stop(cl.opts.grace_s)
    history = asyncio.run(read_history(cl.redis_url, cl.run_id))
    sched = next(s for s in services if s["service"] == "scheduler")
    rows = sched["metrics"]["requests"]
    # The workload starts with its first turn's arrival (the load generator's start-up is
    # not part of the emulated run); row[6] = arrival, row[9] = last token (RequestRecord).
    t_start = min((row[6] for row in rows), default=t_now)
    t_end = max((row[9] for row in rows), default=t_start)
    extra = {"cluster_wall_s": time.perf_counter() - started, "turns": turns, "killed": killed}
    workload = build_workload(sc)  # what the load replayed (the same scripts: docs/loadgen.md)
    report = process_report(sc, workload, services, t_start, t_end, wall_s, extra)
    report["workload"] = workload_section(workload)
    report["history"] = history
    if cl.faults is not None:  # what the launcher did, at the emulated times it did it
        report["faults"]["events"] = cl.faults.log + report["faults"]["events"]
    check_report(report)  # against docs/report.schema.json when $DUALPATH_VALIDATE_REPORTS
    return report
