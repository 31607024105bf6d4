"""`dualpath experiment --jobs 2` stopped by SIGTERM (a scheduler, `kill`, a pod's end) takes
its pool's workers with it: children die with their parent."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.polling import wait_until

# Two paper-scale runs: minutes each, so both workers are busy when the signal comes.
ONLY = "^ds660b-2p4d-64k-a1024-(basic|dualpath)$"


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    """The pool's workers (spawned: `spawn_main` in their command line)."""
    out = []
    for child in parent.children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


def test_sigterm_stops_the_runner_and_its_workers(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "dualpath", "experiment", "offline-agents", "--jobs", "2"]
    runner = subprocess.Popen(
        [*cmd, "--only", ONLY, "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    parent = psutil.Process(runner.pid)
    try:
        workers = wait_until(
            lambda: _workers(parent) if len(_workers(parent)) >= 2 else None,
            timeout=120,
            what="the pool's two workers",
        )
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=60)
        assert runner.returncode == 130, err
        assert "interrupted; finished runs are kept" in err
        wait_until(lambda: all(_gone(w) for w in workers), timeout=30, what="workers gone")
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
