"""Online serving on virtual time (paper §7.4): Poisson agent arrivals, the stop rule.

Agents arrive at `online.aps` and replay their trajectories (with optional think time).
Every `check_interval_s` the stop rule looks at the sliding window; once it says stop, no
agent starts a new turn and no new agent arrives, the turns in flight finish (so every
block read is also consumed and the integrity checks stay exact), and the report's
`online` block describes the window that ended at the stop time.
"""

from __future__ import annotations

import asyncio
import math
import time

from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import VirtualClock
from dualpath.model.engines.cluster import Cluster
from dualpath.model.workload import online_arrivals
from dualpath.model.workload.script import AgentScript, Workload
from dualpath.report.online import StopRule, Window, decide, online_section
from dualpath.runtimes.virtual.sim import (
    Progress,
    RequestIds,
    SimOutcome,
    make_workload,
    run_agent,
    run_virtual_loop,
    running,
    until_done_or_fatal,
)


def stop_rule(sc: Scenario) -> StopRule:
    o = sc.online
    return StopRule(
        slo_ttft_s=o.slo_ttft_s,
        slo_tpot_s=o.slo_tpot_ms / 1000,
        window_s=o.window_s,
        lookback_s=o.lookback_s,
        tolerance=o.steady_tolerance,
        max_duration_s=o.max_duration_s,
    )


def agents_needed(sc: Scenario) -> int:
    """Enough trajectories that arrivals never run out before max_duration (+25 %, +16)."""
    return math.ceil(sc.online.aps * sc.online.max_duration_s * 1.25) + 16


class _Session:
    """The run's mutable state: arrivals, the window, and the stop decision."""

    def __init__(self, cluster: Cluster, rule: StopRule) -> None:
        self.cluster = cluster
        self.rule = rule
        self.window = Window()
        self.fed = 0
        self.reason: str | None = None
        self.stop_time = 0.0
        self.arrived = 0
        self.finished = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def keep_going(self) -> bool:
        return self.reason is None

    def check(self, now: float) -> None:
        records = self.cluster.metrics.requests
        for r in records[self.fed :]:
            self.window.add(r)
        self.fed = len(records)
        self.reason = decide(self.rule, self.window, now)
        if self.reason is not None:
            self.stop_time = now


async def _agent(s: _Session, script: AgentScript, ids: RequestIds) -> None:
    await run_agent(s.cluster, script, ids, lambda: None, keep_going=s.keep_going)
    s.finished += 1


async def _drive(
    s: _Session, sc: Scenario, scripts: tuple[AgentScript, ...], progress: Progress | None
) -> None:
    clock, o = s.cluster.clock, sc.online
    ids = RequestIds()
    arrivals = iter(zip(online_arrivals(o.aps, len(scripts), sc.seed), scripts, strict=True))
    t_next, script = next(arrivals)
    next_check = o.check_interval_s
    while s.reason is None:
        if t_next <= next_check:
            await clock.sleep_until(t_next)
            task = asyncio.get_running_loop().create_task(_agent(s, script, ids))
            s.tasks.add(task)
            task.add_done_callback(s.tasks.discard)
            s.arrived += 1
            t_next, script = next(arrivals, (math.inf, script))
            continue
        await clock.sleep_until(next_check)
        s.check(next_check)
        if progress is not None:
            progress(int(next_check), int(o.max_duration_s))
        next_check += o.check_interval_s
    if s.tasks:  # drain: the turns in flight finish, nobody starts a new one
        await asyncio.gather(*s.tasks)


async def _online(
    clock: VirtualClock, sc: Scenario, workload: Workload, progress: Progress | None
) -> tuple[Cluster, _Session]:
    async with running(sc, clock, workload) as cluster:
        session = _Session(cluster, stop_rule(sc))
        drive = asyncio.ensure_future(_drive(session, sc, workload.scripts, progress))
        try:
            await until_done_or_fatal(cluster, drive)
        finally:
            for task in list(session.tasks):
                task.cancel()
            await asyncio.gather(*session.tasks, return_exceptions=True)
        return cluster, session


def run_online(sc: Scenario, progress: Progress | None = None) -> SimOutcome:
    """Serve Poisson-arriving agents until the stop rule fires; latencies of the last window."""
    workload = make_workload(sc, agents_needed(sc))
    t0 = time.perf_counter()
    cluster, s = run_virtual_loop(lambda clock: _online(clock, sc, workload, progress))
    end = cluster.clock.now()
    cluster.metrics.end_time = end
    online = online_section(
        s.rule,
        cluster.metrics.requests,
        aps=sc.online.aps,
        stop_time=s.stop_time,
        reason=s.reason or "",
        agents_arrived=s.arrived,
        agents_finished=s.finished,
    )
    online["drain_s"] = end - s.stop_time
    return SimOutcome(cluster, end, time.perf_counter() - t0, workload, online)
