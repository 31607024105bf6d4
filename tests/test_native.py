"""The optional compiled model (dualpath/native/): used only when asked for or by the
virtual-time commands, never stale, and bit-identical to the Python one, also under policies
that subclass the compiled ones."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dualpath import native

# A scenario whose flows exercise sharing, VL arbitration and cascades; prints its metrics.
# `basic` and `dualpath-split` are interpreted subclasses of compiled policy classes.
_PROBE = """
import json, sys
from dualpath.model.config.presets import resolve
from dualpath import native
from dualpath.runtimes.virtual.sim import simulate
sc = resolve("paper-ds660b-2p4d", {"workload": {"agents": 8}, "seed": 3}, sys.argv[1:])
r = simulate(sc)
r.pop("runtime")
print(json.dumps({"native": native.active(), "report": r}, sort_keys=True))
"""
_POLICIES = ("dualpath", "basic", "dualpath-split")
_SIM = (sys.executable, "-m", "dualpath", "sim", "--preset", "smoke", "--quiet")


def test_no_build_is_used_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DUALPATH_NATIVE", raising=False)
    assert native.install() is False
    assert native.active() is False


def test_a_build_of_other_sources_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only a build whose digest matches the sources on disk is ever loaded."""
    stale = tmp_path / "0123456789abcdef0123"
    stale.mkdir()
    (stale / "manifest.json").write_text(json.dumps({"files": {"dualpath.model.links.x": "x.so"}}))
    monkeypatch.setenv("DUALPATH_NATIVE", "1")
    monkeypatch.setenv("DUALPATH_NATIVE_DIR", str(tmp_path))
    assert native.digest() != stale.name
    assert native.install() is False


def test_an_edit_anywhere_in_the_package_invalidates_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Compiled code assumes the types of what it imports, so an edit to a module outside
    the build (here the settings) must also send the package back to Python."""
    services = Path(native.__file__).resolve().parents[2]
    copy = tmp_path / "services"
    shutil.copytree(
        services / "dualpath", copy / "dualpath", ignore=shutil.ignore_patterns("*.pyc")
    )
    monkeypatch.setattr(native, "_SERVICES", copy)
    before = native.digest()
    settings = copy / "dualpath" / "model" / "config" / "settings.py"
    settings.write_text(settings.read_text() + "\n# edited\n")
    assert "dualpath.model.config.settings" not in native.MODULES
    assert native.digest() != before


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)
def test_compiled_model_gives_the_same_report_bit_for_bit(tmp_path: Path) -> None:
    pytest.importorskip("mypyc")
    env = {**os.environ, "DUALPATH_NATIVE_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "-m", "dualpath.native"], env=env, check=True, capture_output=True
    )
    again = subprocess.run(
        [sys.executable, "-m", "dualpath.native"], env=env, check=True, capture_output=True
    )
    assert again.stdout.decode().startswith("up to date: ")  # no second compile

    def probe(flag: str, policy: str) -> dict[str, object]:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, f"policy.name={policy}"],
            env={**env, "DUALPATH_NATIVE": flag},
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
        return result

    for policy in _POLICIES:
        compiled, python = probe("1", policy), probe("0", policy)
        assert compiled["native"] is True and python["native"] is False
        assert compiled["report"] == python["report"], policy

    # Unasked, `dualpath sim` loads it (and says nothing); the process runtime would not.
    unasked = {k: v for k, v in env.items() if k != "DUALPATH_NATIVE"}
    out = tmp_path / "sim.json"
    done = subprocess.run(
        [*_SIM, "--out", str(out)],
        env=unasked,
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(out.read_text())["runtime"]["compiled"] is True
    assert "compiled model" not in done.stderr


@pytest.mark.parametrize(
    ("env", "argv", "mode"),
    [
        ({"DUALPATH_NATIVE": "1"}, ["/usr/bin/python", "-c", "x"], native.ON),
        ({"DUALPATH_NATIVE": "0"}, ["/venv/bin/dualpath", "sim"], native.OFF),
        ({"DUALPATH_NATIVE": "yes"}, ["/venv/bin/dualpath", "sim"], native.OFF),
        ({}, ["/venv/bin/dualpath", "sim", "--preset", "smoke"], native.AUTO),
        ({}, ["/venv/bin/dualpath", "experiment", "ablation"], native.AUTO),
        ({}, ["-m", "plan", "--agents-slo", "1"], native.AUTO),  # `python -m dualpath plan`
        ({}, ["/venv/bin/dualpath", "--verbose", "sim"], native.AUTO),
        ({}, ["/venv/bin/dualpath", "up", "--preset", "smoke"], native.OFF),  # process runtime
        ({}, ["/venv/bin/dualpath"], native.OFF),
        ({}, ["/venv/bin/pytest", "sim"], native.OFF),  # not the dualpath command
        ({}, ["/work/x/dualpath/__main__.py", "sim"], native.OFF),  # (after runpy set argv[0])
    ],
)
def test_the_virtual_time_commands_load_a_build_unasked_and_nothing_else_does(
    env: dict[str, str], argv: list[str], mode: str
) -> None:
    assert native.wanted(env, argv) == mode


def test_a_virtual_time_command_without_a_build_says_how_to_get_one(tmp_path: Path) -> None:
    """No build of these sources: the run goes on in Python and one stderr line says why and
    what to run; a stale build is named as such."""
    env = {k: v for k, v in os.environ.items() if k != "DUALPATH_NATIVE"}

    def sim(out: str) -> tuple[str, bool]:
        done = subprocess.run(
            [*_SIM, "--out", str(tmp_path / out)],
            env={**env, "DUALPATH_NATIVE_DIR": str(tmp_path / "cache")},
            check=True,
            capture_output=True,
            text=True,
        )
        report = json.loads((tmp_path / out).read_text())
        return done.stderr, report["runtime"]["compiled"]

    err, compiled = sim("a.json")
    assert compiled is False
    assert "there is no compiled model" in err and "make native" in err
    stale = tmp_path / "cache" / "0123456789abcdef0123"
    stale.mkdir(parents=True)
    (stale / "manifest.json").write_text(json.dumps({"files": {}}))
    err, compiled = sim("b.json")
    assert compiled is False
    assert "built from other sources" in err
