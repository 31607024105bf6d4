"""Every process builds the same cluster from the same scenario and keeps its own part."""

from __future__ import annotations

from dataclasses import dataclass

from dualpath.config.settings import Scenario
from dualpath.core.clock import Clock
from dualpath.links import Link
from dualpath.runtime.cluster import Cluster, build_cluster
from dualpath.runtime.sim import make_workload, mean_shape
from dualpath.serving.mover import owner_of


@dataclass(slots=True)
class World:
    cluster: Cluster
    me: str

    def owned_links(self) -> list[Link]:
        return [ln for ln in self.cluster.hw.fabric.links.values() if owner_of(ln.name) == self.me]


def build_world(sc: Scenario, clock: Clock, me: str) -> World:
    """The limits (α, β) depend on the scenario's workload shape, as in `dualpath sim`, so
    every process derives the same ones."""
    ctx, app = mean_shape(make_workload(sc).scripts)
    cluster = build_cluster(sc, clock, ctx, app)
    if me != "scheduler":
        cluster.scheduler.stop()  # only the scheduler process schedules
    return World(cluster, me)
