"""Every process builds the same cluster from the same scenario and keeps its own part."""

from __future__ import annotations

from dataclasses import dataclass

from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.core.clock import Clock
from dualpath.model.engines.cluster import Cluster
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.links import Link
from dualpath.model.workload.script import Workload, mean_shape
from dualpath.runtimes.cluster import SchedulerFactory, build_cluster
from dualpath.runtimes.process.serving.mover import owner_of


@dataclass(slots=True)
class World:
    cluster: Cluster
    me: str

    def owned_links(self) -> list[Link]:
        return [ln for ln in self.cluster.hw.fabric.links.values() if owner_of(ln.name) == self.me]


def build_world(
    sc: Scenario,
    clock: Clock,
    me: str,
    scheduler: SchedulerFactory = GlobalScheduler,
    workload: Workload | None = None,
) -> World:
    """The limits (α, β) depend on the scenario's workload shape, as in `dualpath sim`, so
    every process derives the same ones. `scheduler`: the class the scheduler process runs
    (its `RemoteScheduler`); every other process keeps the core's, idle. `workload`: the
    scenario's, if the caller has it already (else built here)."""
    ctx, app = mean_shape((workload or build_workload(sc)).scripts)
    cluster = build_cluster(sc, clock, ctx, app, scheduler=scheduler)
    if me != "scheduler":
        cluster.scheduler.stop()  # only the scheduler process schedules
    return World(cluster, me)
