"""A real local cluster (Redis + storage + one process per node + scheduler) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions


def scenario(*sets: str, agents: int = 2) -> Scenario:
    return resolve("smoke", {"workload": {"agents": agents}}, list(sets))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Round-robin placement alternates the read path, so both paths are exercised."""
    run_dir: Path = tmp_path_factory.mktemp("cluster")
    cl = LocalCluster(scenario("policy.name=round_robin"), UpOptions(run_dir, http_port=0))
    try:
        cl.start()
        yield cl
    finally:
        cl.stop()


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A smoke cluster of the test's own, for tests that kill its processes or need it
    untouched by earlier tests."""
    cl = LocalCluster(scenario(), UpOptions(tmp_path, http_port=0))
    try:
        cl.start()
        yield cl
    finally:
        cl.stop()
