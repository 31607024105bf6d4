"""Online serving on virtual time (paper §7.4): Poisson agent arrivals, the stop rule.

Agents arrive at `online.aps` and replay their trajectories (with optional think time).
Every `check_interval_s` the stop rule looks at the sliding window; once it says stop, no
agent starts a new turn and no new agent arrives, the turns in flight finish (so every
block read is also consumed and the integrity checks stay exact), and the report's
`online` block describes the window that ended at the stop time.
"""

from __future__ import annotations

import math
import time

from dualpath.model.config.settings import Scenario
from dualpath.model.core.collector import sparse_collection
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.engines.cluster import Cluster
from dualpath.model.workload import online_arrivals
from dualpath.model.workload.script import AgentScript
from dualpath.report.online import StopRule, Window, decide, online_section
from dualpath.runtimes.virtual.agents import Agent, Turns
from dualpath.runtimes.virtual.sim import Progress, SimOutcome, make_workload, start_cluster


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
    """The run's driver and state: arrivals, the window checks, the stop decision, and the
    agents still running. Each step is a callback at its time on the core."""

    def __init__(
        self,
        core: VirtualCore,
        cluster: Cluster,
        rule: StopRule,
        sc: Scenario,
        scripts: tuple[AgentScript, ...],
        progress: Progress | None,
    ) -> None:
        self.core, self.cluster, self.rule, self.progress = core, cluster, rule, progress
        self.o = sc.online
        self.window = Window()
        self.fed = 0
        self.reason: str | None = None
        self.stop_time = 0.0
        self.arrived = 0
        self.finished = 0
        self.trajectory_jct: list[float] = []  # arrival -> last token, completed agents
        self.turns_arrived = 0  # turns in the trajectories of the agents that arrived
        self.think_arrived = 0.0  # and their think time
        self.turns = Turns(cluster)
        self._arrivals = iter(
            zip(online_arrivals(self.o.aps, len(scripts), sc.seed), scripts, strict=True)
        )
        self._t_next, self._script = next(self._arrivals)
        self._next_check = self.o.check_interval_s

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

    def next_event(self) -> None:
        """An arrival due by the next check comes first (also one at the check's time);
        once the rule says stop, nobody arrives and the run ends with the last agent."""
        if self.reason is not None:
            if self.finished == self.arrived:  # drained: the turns in flight finished
                self.core.stop()
        elif self._t_next <= self._next_check:
            self.core.call_at(self._t_next, self._arrive)
        else:
            self.core.call_at(self._next_check, self._check)

    def _arrive(self) -> None:
        t = self.core.now()
        agent = Agent(
            self.turns,
            self._script,
            lambda: self._agent_ended(agent, t),
            keep_going=self.keep_going,
        )
        self.arrived += 1
        self.turns_arrived += len(self._script.turns)
        self.think_arrived += sum(turn.think_s for turn in self._script.turns)
        self._t_next, self._script = next(self._arrivals, (math.inf, self._script))
        agent.start()
        self.next_event()

    def _check(self) -> None:
        t = self._next_check
        self.check(t)
        if self.progress is not None:
            self.progress(int(t), int(self.o.max_duration_s), t)
        self._next_check += self.o.check_interval_s
        self.next_event()

    def _agent_ended(self, agent: Agent, arrived_at: float) -> None:
        self.finished += 1
        if agent.completed:
            self.trajectory_jct.append(self.core.now() - arrived_at)
        if self.reason is not None and self.finished == self.arrived:
            self.core.stop()


def run_online(sc: Scenario, progress: Progress | None = None) -> SimOutcome:
    """Serve Poisson-arriving agents until the stop rule fires; latencies of the last window."""
    workload = make_workload(sc, agents_needed(sc))
    t0 = time.perf_counter()
    core = VirtualCore()
    with sparse_collection():
        cluster = start_cluster(sc, core, workload)
        s = _Session(core, cluster, stop_rule(sc), sc, workload.scripts, progress)
        s.next_event()
        core.run()
        cluster.scheduler.stop()
    end = core.now()
    cluster.metrics.end_time = end
    online = online_section(
        s.rule,
        cluster.metrics.requests,
        aps=sc.online.aps,
        stop_time=s.stop_time,
        reason=s.reason or "",
        agents_arrived=s.arrived,
        agents_finished=s.finished,
        trajectory_jct=s.trajectory_jct,
        turns_per_trajectory=s.turns_arrived / s.arrived if s.arrived else 0.0,
        think_per_trajectory_s=s.think_arrived / s.arrived if s.arrived else 0.0,
    )
    online["drain_s"] = end - s.stop_time
    return SimOutcome(cluster, end, time.perf_counter() - t0, workload, online)
