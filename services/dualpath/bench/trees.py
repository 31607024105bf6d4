"""Source trees to measure side by side: this working tree, and an older commit run on ITS OWN
code, whatever its package layout.

An older commit is checked out once with `git worktree add --detach` into a cache folder
(`DUALPATH_TREES_DIR`, default `~/.cache/dualpath/trees/<sha>`) and run through its own CLI
(`python -m dualpath sim ...`) with `PYTHONPATH` at that tree's `services/` and this
interpreter (the same virtualenv, so the same libraries). The CLI is the interface the
layouts share; a child prints the folder it imported `dualpath` from and `run_sim` refuses a
run that imported another tree. A child's CPU time and peak RSS are its own (`os.wait4`),
so runs in parallel threads never mix their accounts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dualpath

# Runs the tree's CLI after saying which package it imported (the first stderr line). It
# also times `simulate` alone (the CLI looks it up at call time, so wrapping the module's
# attribute reaches it): a run's fixed cost, about 3 s of imports and report/PNG writing,
# would pull a CPU ratio towards 1. Where neither layout's module exists, no such line.
_SHIM = """\
import importlib, os, runpy, sys, time
import dualpath
sys.stderr.write('dualpath-tree: ' + os.path.dirname(os.path.abspath(dualpath.__file__)) + '\\n')
def _timed(inner):
    def simulate(*args, **kwargs):
        t0 = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            sys.stderr.write('dualpath-sim-cpu: %r\\n' % (time.process_time() - t0))
    return simulate
for _name in ('dualpath.runtimes.virtual.sim', 'dualpath.runtime.sim'):
    try:
        _mod = importlib.import_module(_name)
    except ImportError:
        continue
    _mod.simulate = _timed(_mod.simulate)
    break
sys.stderr.flush()
sys.argv = ['dualpath', *sys.argv[1:]]
runpy.run_module('dualpath', run_name='__main__', alter_sys=False)
"""
MARK = "dualpath-tree: "
SIM_CPU = "dualpath-sim-cpu: "


class TreeError(RuntimeError):
    """A tree could not be checked out or a run in it failed: the message says which."""


@dataclass(frozen=True, slots=True)
class Tree:
    """A source tree: `services` holds its `dualpath` package; `label` names it in tables."""

    label: str
    services: Path
    commit: str  # a sha, or "working tree"

    @property
    def package(self) -> Path:
        return (self.services / "dualpath").resolve()


@dataclass(frozen=True, slots=True)
class Run:
    """One finished child: its report, CPU seconds (user + system, the whole child), the CPU
    seconds inside `simulate` (None when the tree's layout hid it) and peak RSS."""

    report: dict[str, Any]
    cpu_s: float
    sim_cpu_s: float | None
    peak_rss_mb: float
    imported: Path


def repo_root() -> Path:
    """The git checkout this package sits in."""
    here = Path(dualpath.__file__).resolve().parent
    return Path(_git(here, "rev-parse", "--show-toplevel").strip())


def working_tree(label: str = "new") -> Tree:
    """This package's own tree, with its uncommitted edits."""
    return Tree(label, Path(dualpath.__file__).resolve().parent.parent, "working tree")


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], check=False, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise TreeError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def resolve_commit(ref: str) -> str:
    """The full sha of `ref` (a sha, branch or tag) in this checkout's repository."""
    try:
        return _git(repo_root(), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except TreeError:
        raise TreeError(f"--against {ref}: no such commit here (a sha from `git log`)") from None


def trees_dir() -> Path:
    default = Path.home() / ".cache" / "dualpath" / "trees"
    return Path(os.environ.get("DUALPATH_TREES_DIR") or default)


def checkout(ref: str, label: str = "old") -> Tree:
    """`ref` checked out (detached, read-only use) in the cache; reused when already there."""
    sha = resolve_commit(ref)
    path = trees_dir() / sha
    if _orphaned(path):  # made by another clone, or its repository moved: check out again
        shutil.rmtree(path)
    if not (path / ".git").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _git(repo_root(), "worktree", "prune")  # a cache folder deleted by hand
        _git(repo_root(), "worktree", "add", "--detach", str(path), sha)
    head = _git(path, "rev-parse", "HEAD").strip()
    if head != sha:
        raise TreeError(f"{path} is at {head[:12]}, not {sha[:12]}: remove it and run again")
    if not (path / "services" / "dualpath" / "__main__.py").is_file():
        raise TreeError(f"commit {sha[:12]} has no services/dualpath/__main__.py (no CLI)")
    return Tree(label, path / "services", sha)


def _orphaned(path: Path) -> bool:
    """A cached worktree whose repository no longer knows it: its `.git` file points at
    worktree metadata that is gone (the cache outlived the clone that made it). Only such a
    folder is removed: anything else in the cache stays and is checked as before."""
    link = path / ".git"
    if not link.is_file():
        return False
    text = link.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return False
    return not Path(text.removeprefix("gitdir:").strip()).is_dir()


def child_env(tree: Tree, native: bool) -> dict[str, str]:
    """This environment, with `tree`'s package first on the path and the compiled model on
    or off (a compiled build is per source digest, so each tree finds only its own)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree.services), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["DUALPATH_NATIVE"] = "1" if native else "0"
    return env


def build_native(tree: Tree) -> None:
    """Compile `tree`'s model with its own `python -m dualpath.native` (skipped when built)."""
    done = subprocess.run(
        [sys.executable, "-m", "dualpath.native"],
        check=False,
        env=child_env(tree, False),
        cwd=tree.services,
    )
    if done.returncode:
        raise TreeError(f"{tree.label} ({tree.commit[:12]}): python -m dualpath.native failed")


def run_sim(tree: Tree, args: list[str], out: Path, native: bool = False) -> Run:
    """`dualpath sim ARGS --quiet --out OUT` on `tree`'s own code, in a child of its own."""
    out = out.resolve()  # the child runs in out's folder
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", _SHIM, "sim", *args, "--quiet", "--out", str(out)]
    with tempfile.TemporaryFile("w+") as err:
        # cwd: the output folder, so that the child's sys.path[0] holds no other package
        proc = subprocess.Popen(
            cmd, env=child_env(tree, native), cwd=out.parent, stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap it again
        err.seek(0)
        stderr = err.read()
    if proc.returncode:
        tail = stderr.strip().splitlines()[-3:]
        raise TreeError(
            f"{tree.label}: dualpath sim {' '.join(args)} exited {proc.returncode}: "
            + " | ".join(tail)
        )
    imported = _marked(stderr, MARK)
    if imported is None or Path(imported).resolve() != tree.package:
        raise TreeError(f"{tree.label}: the child imported {imported}, not {tree.package}")
    report = json.loads(out.read_text())
    if bool(report["runtime"].get("compiled")) != native:  # a stale or missing build
        ran = "compiled" if report["runtime"].get("compiled") else "in Python"
        raise TreeError(f"{tree.label}: ran {ran}, not as asked (python -m dualpath.native there)")
    cpu = usage.ru_utime + usage.ru_stime
    sim_cpu = _marked(stderr, SIM_CPU)
    rss_mb = usage.ru_maxrss / 1024  # Linux: KiB
    return Run(report, cpu, float(sim_cpu) if sim_cpu else None, rss_mb, Path(imported or ""))


def _marked(stderr: str, mark: str) -> str | None:
    """The rest of the first stderr line that starts with `mark`."""
    for line in stderr.splitlines():
        if line.startswith(mark):
            return line[len(mark) :]
    return None
