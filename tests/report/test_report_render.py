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


def test_the_report_says_what_the_simulator_did_a_turn() -> None:
    report = simulate(small(agents=2))
    rt, turns = report["runtime"], report["requests"]["completed"]
    assert turns > 0 and rt["flows"] > 0 and rt["reshares"] > 0
    assert rt["link_recomputations"] > 0
    row = (
        f"| simulator work a turn | {rt['flows'] / turns:.1f} flows, "
        f"{rt['reshares'] / turns:.1f} re-shares, "
        f"{rt['link_recomputations'] / turns:.1f} link recomputations, "
        f"{report['gpu']['decode_chunks'] / turns:.2f} decode chunks |"
    )
    assert row in markdown_report(report)
    process = copy.deepcopy(report)  # the process runtime counts no simulator work
    process["runtime"].update(kind="process", flows=None, reshares=None, link_recomputations=None)
    assert "simulator work" not in markdown_report(process)
