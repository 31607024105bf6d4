"""report/build.py: the report is built from the workload the run was given, never from a
workload rebuilt from the scenario (the process runtime's report used to rebuild it)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from dualpath.model.config import workload_sources
from dualpath.model.entities.metrics import RequestLog, RequestRecord
from dualpath.report.build import _latency, build_report
from dualpath.runtimes.virtual.sim import run_offline
from tests.runtimes.virtual.conftest import small


def test_the_report_uses_the_workload_it_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = run_offline(small(agents=4))

    def no_rebuild(name: str) -> None:
        raise AssertionError(f"workload source {name!r} looked up again while reporting")

    monkeypatch.setattr(workload_sources, "find_source", no_rebuild)
    r = build_report(outcome.cluster, outcome.jct_s, outcome.wall_s, outcome.workload)
    keys = [s.key for s in outcome.workload.scripts]
    assert r["jct_floor"]["agent"] in keys and r["jct_floor"]["last_agent"]["agent"] in keys
    assert r["jct_floor_s"] <= r["jct_s"]


def test_latency_is_the_per_turn_definition_row_by_row() -> None:
    """TTFT of every turn, TTST of turns with >= 2 tokens, TPOT of turns with >= 3 and the
    pooled ITL: the vectorized report against the definitions, one row at a time."""
    rng = random.Random(3)
    rows = []
    for i in range(500):
        arrival = rng.uniform(0.0, 100.0)
        first = arrival + rng.uniform(0.01, 2.0)
        second = first + rng.uniform(0.001, 0.1)
        gen = rng.choice((1, 2, 3, 7, 300))
        last = second + (gen - 2) * rng.uniform(0.001, 0.05) if gen >= 2 else first
        rows.append(RequestRecord(i % 17, i, 1000, 0, gen, "pe", arrival, first, second, last))
    cluster = SimpleNamespace(metrics=SimpleNamespace(requests=RequestLog(rows)))
    got = _latency(cluster)  # type: ignore[arg-type]  # only .metrics.requests is read
    ttft = [x.t_first - x.arrival for x in rows]
    ttst = [x.t_second - x.t_first for x in rows if x.gen >= 2]
    tpot = [(x.t_last - x.t_second) / (x.gen - 2) for x in rows if x.gen >= 3]
    for name, values in (("ttft_s", ttft), ("ttst_s", ttst), ("tpot_s", tpot)):
        assert got[name]["n"] == len(values)
        assert got[name]["mean"] == pytest.approx(sum(values) / len(values), rel=1e-12)
        assert got[name]["quantiles"][0] == round(min(values), 6)
        assert got[name]["quantiles"][100] == round(max(values), 6)
        assert got[name]["p50"] == float(np.percentile(values, 50))
    decoding = 0.0
    for x in rows:
        if x.gen >= 2:
            decoding += x.t_last - x.t_first
    # a running sum in row order: equal to the last bit, as the loop it replaced
    assert got["itl_mean_s"] == decoding / sum(x.gen - 1 for x in rows if x.gen >= 2)
