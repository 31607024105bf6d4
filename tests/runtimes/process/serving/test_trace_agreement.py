"""A slice of a real trace on both runtimes: the live cluster (Locust replaying the scripts
through the block-id agent-turn form, content-addressed at the front door) and virtual time
(the trace loader's forks) give the same requests and blocks, and JCT within 5 %."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualpath.runtimes.process.launcher.local import UpOptions
from dualpath.runtimes.process.launcher.run import run_workload
from dualpath.runtimes.virtual.sim import simulate
from tests.paths import WEKA
from tests.runtimes.process.serving.conftest import scenario

pytestmark = pytest.mark.slow


def test_a_weka_slice_agrees_across_runtimes(tmp_path: Path) -> None:
    sc = scenario(
        "workload.source=weka",
        f"workload.trace={WEKA}",
        "workload.trace_sessions=2",
        "workload.trace_turns=15",
        "workload.time_scale=0.01",
    )
    virtual = simulate(sc)
    # dilation 1 (≈70 s wall): +1.0 % JCT on an idle host, counts identical. At dilation 2
    # it was +2.1 % idle and +5.1 % once inside the whole suite on 2 cores (the host's lag
    # lengthens the live turns), past the 5 % this test allows: speed is not what it checks.
    proc = run_workload(sc, UpOptions(tmp_path, http_port=0, dilation=1.0)).report
    assert proc["requests"]["completed"] == virtual["requests"]["completed"] == 30
    assert proc["requests"]["failed"] == 0
    pi, vi = proc["integrity"], virtual["integrity"]
    assert pi["blocks_lost"] == pi["blocks_corrupted"] == 0 and pi["conservation_ok"]
    assert pi["blocks_persisted"] == vi["blocks_persisted"]
    assert pi["blocks_read"] == pytest.approx(vi["blocks_read"], rel=1e-3)
    assert proc["tokens"]["hit_rate"] > 0.9  # the sessions' real prefix reuse, both sides
    assert proc["jct_s"] == pytest.approx(virtual["jct_s"], rel=0.05)
    assert proc["history"]["ok"]
