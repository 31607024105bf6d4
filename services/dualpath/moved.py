"""Old module paths keep importing, with a warning naming the new one.

The package was laid out by role (issue 25: `dualpath.engines` -> `dualpath.model.engines`,
`dualpath.serving` -> `dualpath.runtimes.process.serving`, ...). A plug-in or script written
against an old path still runs: importing it gives the module at its new path, and a
`FutureWarning` (shown by default, unlike a DeprecationWarning) that says where it went.
New code imports from `dualpath.api`, which does not move.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

# old -> new, below `dualpath.`; the longest matching prefix wins
MOVED: dict[str, str] = {
    "entities": "model.entities",
    "core": "model.core",
    "blocks": "model.blocks",
    "links.bench": "bench.links",
    "links": "model.links",
    "faults": "model.faults",
    "roofline": "model.roofline",
    "workload": "model.workload",
    "config": "model.config",
    "policies": "model.policies",
    "engines": "model.engines",
    "runtime.cluster": "runtimes.cluster",
    "runtime": "runtimes.virtual",
    "serving": "runtimes.process.serving",
    "control": "runtimes.process.control",
    "frontdoor": "runtimes.process.frontdoor",
    "launcher.load_bench": "bench.locust",
    "launcher.bench": "bench.process",
    "launcher.load": "loadgen.drive",
    "launcher.workload": "loadgen.demo",
    "launcher": "runtimes.process.launcher",
    "containers": "deploy.containers",
    "cli_common": "cli.common",
    "cli_progress": "cli.progress",
    "cli_calibrate": "cli.calibrate",
    "cli_cluster": "cli.serve",
    "cli_containers": "cli.cluster",
    "cli_deploy": "cli.deploy",
    "cli_load": "cli.load",
    "experiments.command": "cli.experiment",
}
PREFIX = "dualpath."


class MovedModuleWarning(FutureWarning):
    """An import named a module path from before the layout by role."""


def new_name(fullname: str) -> str | None:
    """The module's path today, or None when `fullname` did not move."""
    if not fullname.startswith(PREFIX):
        return None
    rest = fullname[len(PREFIX) :]
    for old in sorted(MOVED, key=len, reverse=True):
        if rest == old or rest.startswith(old + "."):
            return PREFIX + MOVED[old] + rest[len(old) :]
    return None


class _Alias(Loader):
    """Loads an old name as the module at its new name (the same object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


class MovedFinder(MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = new_name(fullname)
        if new is None or (new in sys.modules and sys.modules[new] is None):
            return None
        if importlib.util.find_spec(new) is None:
            return None
        warnings.warn(
            f"{fullname} moved to {new}: import it from there (or from dualpath.api)",
            MovedModuleWarning,
            stacklevel=2,
        )
        return ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first, once: an old name must never reach the path finder, which would
    find its submodules in the new folder and load a second copy of each under the old name."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
