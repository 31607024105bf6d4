"""Emulated network/memory fabric: fluid links, processor sharing, IB VL arbitration."""

from dualpath.links.native import install as _install_native

_install_native()  # DUALPATH_NATIVE=1: a compiled build of these very sources (native.py)

from dualpath.links.arbitration import (  # noqa: E402 - after the native hook, on purpose
    VlArbitration,
    allocate,
    paper_cnic_arbitration,
    saturated_shares,
    vl_allocation,
)
from dualpath.links.fabric import Fabric  # noqa: E402
from dualpath.links.link import Flow, Link  # noqa: E402

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
