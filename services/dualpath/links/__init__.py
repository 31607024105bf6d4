"""Emulated network/memory fabric: fluid links, processor sharing, IB VL arbitration."""

from dualpath.links.arbitration import (
    VlArbitration,
    allocate,
    paper_cnic_arbitration,
    saturated_shares,
    vl_allocation,
)
from dualpath.links.fabric import Fabric
from dualpath.links.link import Flow, Link

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
