"""DualPath testbed: an emulation of PD-disaggregated inference with dual-path KV loading."""

from dualpath.native import install as _install_native

_install_native()  # DUALPATH_NATIVE=1: a compiled build of these very sources (dualpath/native/)
