"""The wired model of one scenario, as the composition root (runtimes/cluster.py) hands it out.

Both runtimes and the report take their parts from here through this public surface: a
side's engine context and engine groups (`context`, `groups`), and its units built with the
caller's own hooks (`units_on`): the process runtime's node builds only the units of its
own GPUs this way, with the same grouping as the whole cluster's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import Clock
from dualpath.model.engines.context import EngineContext
from dualpath.model.engines.decode import DecodeUnit
from dualpath.model.engines.faults import VirtualFaults
from dualpath.model.engines.hardware import Hardware
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.entities.metrics import Metrics
from dualpath.model.entities.request import EngineState
from dualpath.model.policies.base import Limits, SchedulingPolicy
from dualpath.model.roofline import Roofline

U = TypeVar("U")
SIDES = ("prefill", "decode")


@dataclass(slots=True, eq=False)
class Cluster:
    scenario: Scenario
    clock: Clock
    hw: Hardware
    metrics: Metrics
    policy: SchedulingPolicy
    scheduler: GlobalScheduler
    prefill_units: list[PrefillUnit]
    decode_units: list[DecodeUnit]
    prefill_roofline: Roofline
    decode_roofline: Roofline
    limits: Limits
    faults: VirtualFaults
    prefill_ctx: EngineContext
    decode_ctx: EngineContext
    prefill_groups: list[list[EngineState]]  # one list per EP group, as built
    decode_groups: list[list[EngineState]]

    @property
    def lockstep(self) -> bool:
        """MoE: the GPUs of an EP group step together (one unit per group); dense: DP only,
        one unit per GPU."""
        return self.prefill_roofline.moe_layers > 0

    def context(self, side: str) -> EngineContext:
        """The engine context of `side` ("prefill" or "decode"): its roofline differs."""
        return self.prefill_ctx if _side(side) == "prefill" else self.decode_ctx

    def groups(self, side: str) -> list[list[EngineState]]:
        return self.prefill_groups if _side(side) == "prefill" else self.decode_groups

    def units_on(self, side: str, node: str, make: Callable[[list[EngineState]], U]) -> list[U]:
        """The units of `side` whose engines are on `node`, each `make(engines)`: one per EP
        group's GPUs on the node (lockstep) or one per GPU."""
        mine = [[e for e in g if e.node.name == node] for g in self.groups(side)]
        return make_units([g for g in mine if g], self.lockstep, make)


def make_units(
    groups: list[list[EngineState]], lockstep: bool, make: Callable[[list[EngineState]], U]
) -> list[U]:
    """One unit per group (MoE: its GPUs step together) or per GPU (dense, DP only)."""
    units: list[U] = []
    for group in groups:
        members = [group] if lockstep else [[e] for e in group]
        units.extend(make(m) for m in members)
    return units


def _side(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"side {side!r}: engines are on the 'prefill' or the 'decode' side")
    return side
