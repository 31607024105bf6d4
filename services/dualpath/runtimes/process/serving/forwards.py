"""Prefill units' forwards across processes (`engine.fetch_mode = per-forward`,
docs/scheduling.md): `ForwardReports` on a PE node, `RemoteForwards` on the scheduler.

On virtual time the scheduler asks each `PrefillUnit` whether it is in a forward. Here the
units run in the PE node processes, so each node reports a unit's forward beginning and
ending (REPORT_KIND_FORWARD), and this mirror answers the same question: a PE group is busy
when every one of its units on a live node is in a forward. A unit is keyed by its first
engine id, as the nodes build them (`make_units`: one per EP group's GPUs on a node, or one
per GPU). A node that is lost forgets its units' forwards, so a group it left busy fetches
again, and a node that starts reports its units idle (a node restarted before it was
declared lost may have died in a forward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dualpath.model.engines.cluster import make_units
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.entities.request import EngineState
from dualpath.rpc.v1 import scheduler_pb2

Send = Callable[[scheduler_pb2.Report], None]


class ForwardReports:
    """A PE node's units report each forward's beginning and end through `send`."""

    def __init__(self, units: Sequence[PrefillUnit], send: Send) -> None:
        self._units = list(units)
        self._send = send
        for unit in self._units:
            unit.on_forward_begin = self._began
            unit.on_forward_end = self._ended

    def idle(self) -> None:
        """At start: no unit of this node is in a forward."""
        for unit in self._units:
            self._ended(unit)

    def resync(self) -> None:
        """Report every unit's state now. After reports were dropped (the scheduler was
        unreachable too long) a lost forward end would hold its group's fetches for good:
        an idle group that does not fetch never begins the forward whose end would free it."""
        for unit in self._units:
            self._report(unit, unit.in_forward)

    def _began(self, unit: PrefillUnit) -> None:
        self._report(unit, True)

    def _ended(self, unit: PrefillUnit) -> None:
        self._report(unit, False)

    def _report(self, unit: PrefillUnit, in_forward: bool) -> None:
        self._send(
            scheduler_pb2.Report(
                kind=scheduler_pb2.REPORT_KIND_FORWARD,
                unit=unit.engines[0].engine_id,
                in_forward=in_forward,
            )
        )


class RemoteForwards:
    """The scheduler's mirror of which PE units are in a forward, from the nodes' reports."""

    def __init__(self, pe_groups: Sequence[Sequence[EngineState]], lockstep: bool) -> None:
        self._units: list[list[tuple[str, str]]] = []  # group -> (unit key, node) of each unit
        self._group: dict[str, int] = {}  # unit key -> its group
        for g, group in enumerate(pe_groups):
            nodes = list(dict.fromkeys(e.node.name for e in group))
            by_node = [[e for e in group if e.node.name == n] for n in nodes]
            keys = make_units(by_node, lockstep, lambda es: (es[0].engine_id, es[0].node.name))
            self._units.append(keys)
            self._group.update({key: g for key, _ in keys})
        self._in_forward: set[str] = set()
        self.reported = 0  # forward beginnings and ends reported by the nodes

    def began(self, unit: str) -> None:
        self.reported += 1
        if unit in self._group:
            self._in_forward.add(unit)

    def ended(self, unit: str) -> int | None:
        """The unit's forward ended: its group, to fetch now (None: unknown unit)."""
        self.reported += 1
        self._in_forward.discard(unit)
        return self._group.get(unit)

    def busy(self, g: int, down: Callable[[str], bool]) -> bool:
        """Every unit of group g on a node that is not down is in a forward (a group with
        no live unit is not busy: placement skips it anyway)."""
        live = [key for key, node in self._units[g] if not down(node)]
        return bool(live) and all(key in self._in_forward for key in live)

    def node_lost(self, node: str) -> list[int]:
        """Forget the forwards of `node`'s units: the groups that had one (to fetch again)."""
        groups: list[int] = []
        for g, units in enumerate(self._units):
            for key, where in units:
                if where == node and key in self._in_forward:
                    self._in_forward.discard(key)
                    groups.append(g)
        return sorted(set(groups))
