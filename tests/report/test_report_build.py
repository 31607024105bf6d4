"""report/build.py: the report is built from the workload the run was given, never from a
workload rebuilt from the scenario (the process runtime's report used to rebuild it)."""

from __future__ import annotations

import pytest

from dualpath.model.config import workload_sources
from dualpath.report.build import build_report
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
