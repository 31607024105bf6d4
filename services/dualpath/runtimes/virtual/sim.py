"""The virtual-time runtime: the whole emulated cluster in one process on virtual time.

Deterministic for a seed, no sockets, much faster than real time. It runs on the
`VirtualCore` (model/core/virtual_core.py), a timer heap without asyncio: the engines, the
fabric and the agents (runtimes/virtual/agents.py) are state machines driven by its
callbacks. The same engine, scheduler and link objects run in the process runtime on a
dilated real clock. `run_virtual_loop` is for code that needs asyncio on virtual time (the
link and engine tests that drive the model from coroutines).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.core.clock import VirtualClock, VirtualTimeLoop
from dualpath.model.core.collector import sparse_collection
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.engines.cluster import Cluster
from dualpath.model.workload.script import AgentScript, Workload, mean_shape
from dualpath.report.build import build_report, workload_section
from dualpath.report.schema import check_report
from dualpath.runtimes.cluster import build_cluster
from dualpath.runtimes.virtual.agents import Agent, OpenLoopAgent, RequestIds, Turns

__all__ = ["RequestIds", "SimOutcome", "make_workload", "run_offline", "simulate"]

# (done, total, emulated s now): turns offline, whole emulated seconds online. The emulated
# time comes with the call: the virtual core is no asyncio loop a hook could ask.
Progress = Callable[[int, int, float], None]


@dataclass(slots=True)
class SimOutcome:
    cluster: Cluster
    jct_s: float
    wall_s: float
    workload: Workload
    online: dict[str, Any] | None = None


def make_workload(sc: Scenario, n_agents: int | None = None) -> Workload:
    """The scenario's agent scripts: synthetic (Table 2) or a trace (`workload.source`)."""
    return build_workload(sc, n_agents)


def start_cluster(sc: Scenario, core: VirtualCore, workload: Workload) -> Cluster:
    """Build the cluster on the core. Its engines run by callbacks: nothing to start."""
    ctx, app = mean_shape(workload.scripts)
    cluster = build_cluster(sc, core, ctx, app)
    cluster.scheduler.ctx.chains.declare_all(workload.forks)  # shared prefixes of a trace
    return cluster


class _Offline:
    """The offline run's driver: every session from its start time; the run ends (JCT)
    when the last one has finished."""

    def __init__(
        self, sc: Scenario, core: VirtualCore, cluster: Cluster, progress: Progress | None
    ) -> None:
        self.core, self.progress = core, progress
        self.total = 0
        self.left = 0  # sessions still running
        self.turns = Turns(cluster, self.on_turn if progress is not None else None)
        self.open_loop = sc.workload.replay == "open-loop"

    def on_turn(self) -> None:
        if self.progress is not None:
            self.progress(self.turns.done, self.total, self.core.now())

    def on_end(self) -> None:
        self.left -= 1
        if not self.left:
            self.core.stop()

    def start(self, scripts: tuple[AgentScript, ...]) -> None:
        self.total = sum(len(s.turns) for s in scripts)
        self.left = len(scripts)
        if not scripts:
            self.core.stop()
        for script in scripts:
            agent: Agent | OpenLoopAgent
            if self.open_loop:
                agent = OpenLoopAgent(self.turns, script, self.on_end)
            else:  # a session starts at its `start_s` (0 for synthetic agents: all together)
                agent = Agent(self.turns, script, self.on_end)
            if script.start_s > 0 and not self.open_loop:
                self.core.call_at(script.start_s, agent.start)
            else:
                agent.start()


def run_offline(
    sc: Scenario,
    progress: Progress | None = None,
    setup: Callable[[Cluster], None] | None = None,
) -> SimOutcome:
    """N agents start together and run their whole trajectories; JCT when all finish.
    `setup(cluster)` runs before the first turn (tests instrument the cluster with it)."""
    with sparse_collection():  # a request's objects live as long as the run: none are cycles
        workload = make_workload(sc)
    t0 = time.perf_counter()
    core = VirtualCore()
    with sparse_collection():
        cluster = start_cluster(sc, core, workload)
        if setup is not None:
            setup(cluster)
        _Offline(sc, core, cluster, progress).start(workload.scripts)
        core.run()
        cluster.scheduler.stop()
    jct = core.now()
    cluster.metrics.end_time = jct
    return SimOutcome(cluster, jct, time.perf_counter() - t0, workload)


T = TypeVar("T")


def run_virtual_loop(main: Callable[[VirtualClock], Coroutine[Any, Any, T]]) -> T:
    """Run `main` on a fresh virtual-time loop. On Ctrl-C the tasks are cancelled and the
    loop closed cleanly before KeyboardInterrupt propagates (no 'loop is closed' noise)."""
    loop = VirtualTimeLoop()
    try:
        with sparse_collection():
            return loop.run_until_complete(main(VirtualClock(loop)))
    except KeyboardInterrupt:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.set_exception_handler(lambda _loop, _ctx: None)  # cancelled work is not news
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        raise
    finally:
        loop.close()


def simulate(sc: Scenario, progress: Progress | None = None) -> dict[str, Any]:
    """Run a scenario on virtual time and return the report (schema dualpath.report/v1)."""
    if sc.workload.mode == "online":
        from dualpath.runtimes.virtual.online import run_online

        outcome = run_online(sc, progress)
    else:
        outcome = run_offline(sc, progress)
    with sparse_collection():  # a report reads millions of rows: no cycles to collect there
        report = build_report(outcome.cluster, outcome.jct_s, outcome.wall_s, outcome.workload)
    report["workload"] = workload_section(outcome.workload)
    if outcome.online is not None:
        report["online"] = outcome.online
    check_report(report)  # against docs/report.schema.json when $DUALPATH_VALIDATE_REPORTS
    return report
