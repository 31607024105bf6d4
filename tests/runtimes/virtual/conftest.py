from __future__ import annotations

from typing import Any

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.virtual.sim import simulate


def small(*sets: str, agents: int = 8) -> Scenario:
    """A seconds-long scenario: DS 27B, 1P1D with 2 GPUs per node, 32K MaxLen."""
    return resolve("smoke", {"workload": {"agents": agents}}, list(sets))


@pytest.fixture(scope="session")
def smoke_report() -> dict[str, Any]:
    return simulate(small())
