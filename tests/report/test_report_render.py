"""report/render.py: the report names the PE fetch cadence that shaped its TTFTs."""

from __future__ import annotations

import copy

from dualpath.report.render import markdown_report
from dualpath.runtimes.virtual.sim import simulate
from tests.runtimes.virtual.conftest import small


def test_the_report_names_the_pe_fetch_cadence() -> None:
    report = simulate(small(agents=2))
    assert "| PE fetch | per-forward: a PE group in a forward takes new work when it ends |" in (
        markdown_report(report)
    )
    on_change = copy.deepcopy(report)
    on_change["scenario"]["engine"].update(fetch_mode="on-change", fetch_interval_ms=20.0)
    assert "| PE fetch | on-change: within 20 ms of a change" in markdown_report(on_change)
    del on_change["scenario"]["engine"]["fetch_mode"]  # a report written before the setting
    assert "PE fetch" not in markdown_report(on_change)
