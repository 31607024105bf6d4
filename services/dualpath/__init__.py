"""DualPath testbed: an emulation of PD-disaggregated inference with dual-path KV loading."""

from dualpath.native import install as _install_native

_install_native()  # DUALPATH_NATIVE=1: a compiled build of these very sources (dualpath/native/)

from dualpath.moved import install as _install_moved  # noqa: E402

_install_moved()  # old module paths (before the layout by role) import with a warning
