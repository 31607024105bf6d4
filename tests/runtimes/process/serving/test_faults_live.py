"""Faults on the live cluster: the nemesis, random fault schedules under a steady load,
checked against the Redis history (a decode node SIGKILLed under load alone is in
test_serving_recovery.py). Real processes on 127.0.0.1, a real Redis."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path

import pytest

from dualpath.runtimes.process.launcher.collect import gather_stats
from dualpath.runtimes.process.launcher.local import UpOptions, local_cluster
from dualpath.runtimes.process.launcher.nemesis import Load, random_schedule, run_schedule
from dualpath.runtimes.process.launcher.procs import ClusterStartError
from tests.runtimes.process.serving.conftest import scenario


def test_nemesis_random_fault_schedules_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    """Two seeded schedules of the nemesis (`python -m dualpath.runtimes.process.launcher.nemesis`
    runs 20)."""
    rng = random.Random(7)
    sc = scenario("topology.decode_nodes=2")
    for i in range(2):
        specs = random_schedule(rng, horizon_s=40.0)
        res = run_schedule(sc, specs, tmp_path / f"s{i}", Load(sessions=10, turns=20))
        v = res["verdict"]
        print(specs, v, res["detect_s"], res["resilience"])
        assert v["turns"] == 200 and v["ok"], v


def test_nemesis_with_storage_kills_loses_no_acknowledged_block(tmp_path: Path) -> None:
    """The storage SIGKILLed twice under the agents' load (and a decode node once): every
    turn is answered (200 or an explicit error), and the storage serves every block it
    acknowledged at the end (a restart reloads its index; the decode nodes send their
    unacknowledged persists again)."""
    sc = scenario("topology.decode_nodes=2")
    specs = ["kill:storage@6+6", "kill:decode0@16+5", "kill:storage@26+4"]
    res = run_schedule(sc, specs, tmp_path, Load(sessions=6, turns=10))
    v = res["verdict"]
    print(specs, v, res["resilience"])
    assert v["turns"] == 60 and v["ok"] and v["persisted_missing"] == 0, v
    assert v["completed"] > 0


def test_random_schedules_kill_the_storage_too() -> None:
    rng = random.Random(3)
    specs = [f for _ in range(40) for f in random_schedule(rng, horizon_s=40.0)]
    assert any(f.startswith("kill:storage@") for f in specs)
    rng = random.Random(3)
    no_storage = [f for _ in range(40) for f in random_schedule(rng, 40.0, storage=False)]
    assert not any("storage" in f for f in no_storage)


def test_the_report_waits_for_a_service_started_again_at_the_very_end(tmp_path: Path) -> None:
    """A kill fault that ends just before the report is gathered: the registry still holds
    the dead process's address (its lease has not expired) and the new one is not up yet.
    `settle` must wait for it (a CI run once failed here with 'connection refused')."""
    sc = scenario("topology.decode_nodes=2")
    with local_cluster(sc, UpOptions(tmp_path, http_port=0, dilation=4.0)) as cl:
        old = cl.grpc_addrs()["decode1"]
        victim = next(p for p in cl.group.procs if p.name == "decode1")
        cl.group.hold("decode1")
        os.kill(victim.popen.pid, signal.SIGKILL)
        victim.popen.wait()
        cl.group.respawn("decode1")
        addrs = cl.settle()
        assert addrs["decode1"] != old
        stats = asyncio.run(gather_stats(addrs))
        assert sorted(s["service"] for s in stats) == sorted(addrs)
        assert set(addrs) == {"storage", "scheduler", "prefill0", "decode0", "decode1"}
        cl.group.hold("storage")  # as a kill fault without an end would
        with pytest.raises(ClusterStartError, match=r"storage stayed down .* kill:storage@10\+5"):
            cl.settle()
        cl.group.respawn("storage")  # still alive: nothing to start


def test_a_node_killed_for_good_is_left_out_of_the_report_not_a_traceback(
    tmp_path: Path,
) -> None:
    sc = scenario("topology.decode_nodes=2")
    res = run_schedule(sc, ["kill:decode1@2"], tmp_path, Load(sessions=2, turns=2))
    v = res["verdict"]
    assert v["turns"] == 4 and v["ok"], v
