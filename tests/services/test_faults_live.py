"""Faults on the live cluster: the nemesis, random fault schedules under a steady load,
checked against the Redis history (a decode node SIGKILLed under load alone is in
test_serving_recovery.py). Real processes on 127.0.0.1, a real Redis."""

from __future__ import annotations

import random
from pathlib import Path

from dualpath.launcher.nemesis import Load, random_schedule, run_schedule

from .conftest import scenario


def test_nemesis_random_fault_schedules_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Two seeded schedules of the nemesis (`python -m dualpath.launcher.nemesis` runs 20)."""
    rng = random.Random(7)
    sc = scenario("topology.decode_nodes=2")
    for i in range(2):
        specs = random_schedule(rng, horizon_s=40.0)
        res = run_schedule(sc, specs, tmp_path / f"s{i}", Load(sessions=10, turns=20))
        v = res["verdict"]
        print(specs, v, res["detect_s"], res["resilience"])
        assert v["turns"] == 200 and v["ok"], v
