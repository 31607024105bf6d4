"""A researcher's own packages, installed (pip, offline) next to the testbed, add a policy
and a GPU profile by entry points: the real CLI lists and runs them; a broken plug-in is a
warning that names it, and the built-ins keep working (docs/plugins.md). The packages are
the ones docs/scheduling.md and docs/plugins.md show, read from the docs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from tests.paths import REPO

DOCS = REPO / "docs"

BROKEN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "broken-plugin"
version = "0.3"

[project.entry-points."dualpath.policies"]
broken = "broken_plugin:Policy"

[tool.setuptools]
packages = ["broken_plugin"]
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _examples(doc: str, heading: str) -> list[str]:
    """The TOML and Python blocks of section `## heading` of docs/`doc`: the test installs
    the documented packages themselves, so the docs cannot drift from what works."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```(?:toml|python)\n(.*?)```", text[start : end if end > 0 else None], re.S)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented packages and a broken one, installed with pip into one folder (no
    network, no build isolation: setuptools comes from the testbed's venv)."""
    tmp = tmp_path_factory.mktemp("plugins")
    pyproject, module = _examples("scheduling.md", "Adding a policy")
    lab = _write(
        tmp / "lab-plugins", {"pyproject.toml": pyproject, "lab_plugins/__init__.py": module}
    )
    h800 = resources.files("dualpath").joinpath("profiles", "gpus", "h800.yaml").read_text()
    profiles = _write(
        tmp / "lab-profiles",
        {
            "pyproject.toml": _examples("plugins.md", "GPU and model profiles")[0],
            "lab_profiles/__init__.py": "",
            "lab_profiles/gpus/lab-h800.yaml": h800.replace("name: h800", "name: lab-h800", 1),
        },
    )
    broken = _write(
        tmp / "broken-plugin",
        {
            "pyproject.toml": BROKEN_PYPROJECT,
            "broken_plugin/__init__.py": 'raise RuntimeError("needs a GPU driver")\n',
        },
    )
    target = tmp / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "--target", str(target)]
    proc = subprocess.run(
        [*pip, *offline, str(lab), str(profiles), str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return target


def _dualpath(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The CLI runs as a user's would, with the target folder on its path like site-packages.
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )


def test_dualpath_policies_lists_the_installed_policy_and_warns_about_the_broken_one(
    site: Path,
) -> None:
    proc = _dualpath(site, "policies")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names[-1] == "always-de"
    assert {"dualpath", "basic", "de-only"} <= set(names)  # built-ins survive the broken one
    assert "broken" not in names
    assert "DualPath assignment; every read on the DE side" in proc.stdout
    (warning,) = proc.stderr.splitlines()
    assert warning == (
        "warning: plug-in entry point 'broken' (group dualpath.policies) of broken-plugin 0.3:"
        " cannot load 'broken_plugin:Policy' (RuntimeError: needs a GPU driver);"
        " fix or uninstall broken-plugin (skipped)"
    )
    assert "Traceback" not in proc.stderr


def test_dualpath_sim_runs_the_plugin_policy_on_the_plugin_gpu(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ("--policy", "always-de", "--gpu", "lab-h800", "--quiet", "--out", str(out))
    proc = _dualpath(site, "sim", "--preset", "smoke", *args)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["policy"]["name"] == "always-de"
    assert report["scenario"]["gpu"] == "lab-h800"
    # The plug-in's own rule ran: DualPath itself reads part of this run on the PE side.
    assert report["read_path"]["pe"] == 0
    assert report["read_path"]["de"] > 0


def test_asking_for_the_broken_plugin_is_a_one_line_error(site: Path) -> None:
    proc = _dualpath(site, "sim", "--preset", "smoke", "--policy", "broken", "--quiet")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "policy 'broken' (policy.name / --policy): plug-in entry point 'broken'" in proc.stderr
    assert "of broken-plugin 0.3: cannot load 'broken_plugin:Policy'" in proc.stderr
