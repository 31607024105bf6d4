"""Emulated network/memory fabric: fluid links, processor sharing, IB VL arbitration."""

from dualpath.model.links.arbitration import (
    VlArbitration,
    allocate,
    paper_cnic_arbitration,
    saturated_shares,
    vl_allocation,
)
from dualpath.model.links.fabric import Fabric
from dualpath.model.links.link import Flow, Link

__all__ = [
    "Fabric",
    "Flow",
    "Link",
    "VlArbitration",
    "allocate",
    "paper_cnic_arbitration",
    "saturated_shares",
    "vl_allocation",
]
