"""Degrading a node's NICs: the one fault both runtimes apply to the same model objects.

On virtual time the schedule's changes are clock callbacks at their exact emulated times;
on processes the node applies the same change to the links it owns when the launcher asks
(`POST /faults/link` on its admin port). Flows in progress re-share at once either way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from dualpath.model.core.clock import Clock
from dualpath.model.engines.hardware import GBPS_TO_BYTES, Hardware
from dualpath.model.faults.spec import Fault, FaultError
from dualpath.model.links import Link


def node_links(hw: Hardware, node: str, link: str) -> list[Link]:
    """The links of `node` a `degrade` of LINK (snic or cnic) changes, both directions."""
    if node not in hw.nodes:
        raise FaultError(f"degrade: no node {node!r}; nodes: {', '.join(sorted(hw.nodes))}")
    if link == "snic":
        n = hw.nodes[node]
        return [n.snic_rx, n.snic_tx]
    gpus = [g for g in hw.gpus.values() if g.engine.node.name == node]
    return [lk for g in gpus for lk in (g.cnic_rx, g.cnic_tx)]


def set_rate(
    hw: Hardware, links: list[Link], gbps: float | None, nominal: dict[str, float]
) -> None:
    """Set each link to `gbps`, or back to its nominal rate (None)."""
    for lk in links:
        nominal.setdefault(lk.name, lk.rate)
        rate = nominal[lk.name] if gbps is None else gbps * GBPS_TO_BYTES
        hw.fabric.set_rate(lk, rate)


@dataclass
class VirtualFaults:
    """Applies a schedule's degrades on a virtual clock, at their exact emulated times."""

    hw: Hardware
    clock: Clock
    log: list[dict[str, Any]] = field(default_factory=list)
    _nominal: dict[str, float] = field(default_factory=dict)

    def schedule(self, faults: list[Fault]) -> None:
        """Arm the degrades of `faults` (the other kinds are the launcher's)."""
        faults = [f for f in faults if f.kind == "degrade"]
        for f in faults:
            links = node_links(self.hw, f.target, f.link)
            self.clock.call_at(f.at_s, functools.partial(self._apply, f, links, f.gbps))
            if f.for_s:
                self.clock.call_at(f.end_s, functools.partial(self._apply, f, links, None))

    def _apply(self, f: Fault, links: list[Link], gbps: float | None) -> None:
        set_rate(self.hw, links, gbps, self._nominal)
        event = "applied" if gbps is not None else "cleared"
        self.log.append({"fault": str(f), "event": event, "t_s": self.clock.now()})
