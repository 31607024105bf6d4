"""The plug-in surface (dualpath/api.py) and the old module paths (dualpath/moved.py): a
plug-in written against either keeps running when the package's folders move."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dualpath import api
from dualpath.moved import MOVED, MovedModuleWarning, new_name


def test_every_public_name_resolves() -> None:
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.register.POLICIES == "dualpath.policies"
    assert issubclass(api.DualPath, api.SchedulingPolicy)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("dualpath.engines.prefill", "dualpath.model.engines.prefill"),
        ("dualpath.serving.node", "dualpath.runtimes.process.serving.node"),
        ("dualpath.runtime.sim", "dualpath.runtimes.virtual.sim"),
        ("dualpath.runtime.cluster", "dualpath.runtimes.cluster"),
        ("dualpath.launcher.load", "dualpath.loadgen.drive"),
        ("dualpath.launcher.local", "dualpath.runtimes.process.launcher.local"),
        ("dualpath.cli_cluster", "dualpath.cli.serve"),
        ("dualpath.report.build", None),
        ("dualpath.model.engines", None),
        ("dualpath.runtimes.virtual", None),
        ("json", None),
    ],
)
def test_old_names_map_to_new_ones(old: str, new: str | None) -> None:
    assert new_name(old) == new


def test_every_new_target_exists() -> None:
    import importlib.util

    for new in MOVED.values():
        assert importlib.util.find_spec(f"dualpath.{new}") is not None, new


def test_an_old_path_imports_the_same_module_with_a_warning_naming_the_new_one() -> None:
    """In a fresh interpreter: the import system caches modules, and the warning fires once."""
    code = (
        "import warnings; warnings.simplefilter('error', FutureWarning)\n"
        "try:\n"
        "    from dualpath.policies.dualpath import DualPath\n"
        "except FutureWarning as w:\n"
        "    print('warned:', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from dualpath.policies.dualpath import DualPath as Old\n"
        "import dualpath.serving.node as old_node\n"
        "from dualpath.api import DualPath as New\n"
        "import dualpath.runtimes.process.serving.node as new_node\n"
        "print('same:', Old is New, old_node is new_node)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "warned: dualpath.policies moved to dualpath.model.policies" in out
    assert "same: True True" in out


def test_the_warning_is_a_future_warning_so_users_see_it() -> None:
    assert issubclass(MovedModuleWarning, FutureWarning)
