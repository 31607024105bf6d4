"""Fixtures for the load generator's tests: one real local cluster for the folder, and a
way to run real Locust (always as its own subprocess: it monkey-patches on import)."""

from __future__ import annotations

import csv
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dualpath.loadgen.command import LocustProcess, LocustRun
from dualpath.model.config.presets import resolve
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions
from dualpath.runtimes.process.launcher.procs import log_tail

# 4 emulated seconds per wall second: smoke sessions finish within a short test.
DILATION = 4.0


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    run_dir: Path = tmp_path_factory.mktemp("loadgen-cluster")
    cl = LocalCluster(resolve("smoke", {}, []), UpOptions(run_dir, http_port=0, dilation=DILATION))
    try:
        cl.start()
        yield cl
    finally:
        cl.stop()


def host_of(cl: LocalCluster) -> str:
    return f"http://{cl.http_addr}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_locust(run: LocustRun, log: Path, timeout_s: float) -> int:
    """Run Locust to its end (bounded); the exit code. Never leaves it running."""
    with LocustProcess(run, log) as proc:
        code = proc.wait(timeout_s)
        assert code is not None, f"Locust still running after {timeout_s} s:\n{log_tail(log)}"
        return code


def stats_rows(csv_prefix: Path) -> dict[tuple[str, str], dict[str, Any]]:
    with Path(f"{csv_prefix}_stats.csv").open() as fh:
        return {(r["Type"], r["Name"]): r for r in csv.DictReader(fh)}
