"""`dualpath experiment dram-tier` (issue 28's crossover study) and the DRAM-tier baselines in
`offline-agents`: the grid, its keys and scenarios, the region rule, the table and the plot,
and one small real run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dualpath.experiments import run_experiment
from dualpath.experiments.dram_tier import (
    AGENTS,
    ARMS,
    DRAM,
    POLICIES,
    DramTier,
    Point,
    classify,
    key,
    run_of,
)
from dualpath.experiments.offline_agents import OfflineAgents
from dualpath.experiments.scenarios import ARM_27B, ARM_660B, dram_tag

QUIET = Console(quiet=True)


def test_full_grid_is_the_issues() -> None:
    specs = DramTier().plan(quick=False)
    keys = [s.key for s in specs]
    assert len(keys) == len(set(keys))
    # per (model, agents): basic, dualpath once; hicache at all 6 sizes; dualpath+tier at 5
    assert len(specs) == len(ARMS) * len(AGENTS) * (2 + len(DRAM) + len(DRAM) - 1)
    assert AGENTS[0] == 256 and AGENTS[-1] == 8192 and DRAM[0] == 0 and DRAM[-1] == 2e12
    by_key = {s.key: s.scenario for s in specs}
    sc = by_key["ds660b-2p4d-64k-a1024-hicache-dram1500gb"]
    assert sc.tier.dram_bytes_per_node == 1.5e12 and sc.workload.max_len == "64k"
    assert (sc.topology.prefill_nodes, sc.topology.decode_nodes) == (2, 4)
    sc = by_key["ds27b-1p1d-64k-a8192-dualpath_tier-dram250gb"]
    assert sc.model == "ds-27b" and sc.tier.dram_bytes_per_node == 0.25e12
    assert sc.policy.name == "dualpath+tier"
    assert by_key["ds27b-1p1d-64k-a256-hicache-dram0gb"].tier.dram_bytes_per_node == 0
    assert "ds27b-1p1d-64k-a256-dualpath_tier-dram0gb" not in by_key  # = dualpath's run
    for s in specs:  # tier-less policies never get a tier
        if s.scenario.policy.name in ("basic", "dualpath"):
            assert s.scenario.tier.dram_bytes_per_node == 0, s.key


def test_tierless_runs_are_offline_agents_runs() -> None:
    """Same key and same scenario: the shared index copies them between the experiments."""
    ours = {s.key: s.scenario for s in DramTier().plan(quick=False)}
    fig7 = {s.key: s.scenario for s in OfflineAgents().plan(quick=False)}
    common = set(ours) & set(fig7)
    assert "ds660b-2p4d-64k-a1024-basic" in common
    assert "ds660b-2p4d-64k-a2048-hicache-dram1500gb" in common
    assert "ds27b-1p1d-64k-a1024-dualpath" in common
    for k in common:
        assert ours[k] == fig7[k], k


def test_offline_agents_adds_the_tier_baselines_on_ds660b_only() -> None:
    specs = OfflineAgents().plan(quick=False)
    keys = [s.key for s in specs]
    # the earlier 45 runs keep their keys (their cached reports stay valid); Qwen 32B adds 9
    old = [k for k in keys if not k.endswith(dram_tag(1.5e12)) and not k.startswith("qwen")]
    assert len(old) == 45 and "ds660b-2p4d-64k-a2048-oracle" in old
    qwen = [k for k in keys if k.startswith("qwen32b-1p2d-32k-")]
    assert len(qwen) == 3 * 3 and len(keys) == 45 + 9 + 12
    tiered = [s for s in specs if s.key.endswith("dram1500gb")]
    assert len(tiered) == 2 * 3 * 2  # 2 policies × 3 MaxLen × 2 agent counts, DS 660B
    assert {s.scenario.policy.name for s in tiered} == {"hicache", "dualpath+tier"}
    assert all(s.key.startswith("ds660b-") for s in tiered)
    assert all(s.scenario.tier.dram_bytes_per_node == 1.5e12 for s in tiered)
    assert all(s.scenario.tier.dram_bytes_per_node == 0 for s in specs if s not in tiered)


def test_run_of_maps_dualpath_tier_at_zero_to_dualpath() -> None:
    p0, p1 = Point(ARM_27B, 256, 0.0), Point(ARM_27B, 256, 0.5e12)
    assert run_of(p0, "dualpath+tier") == ("dualpath", 0.0)
    assert run_of(p1, "dualpath+tier") == ("dualpath+tier", 0.5e12)
    assert run_of(p1, "basic") == ("basic", 0.0)
    assert run_of(p0, "hicache") == ("hicache", 0.0)
    assert key(ARM_27B, True, 4, "hicache", 0.5e9) == "quick-ds27b-1p1d-32k-a4-hicache-dram0.5gb"


@pytest.mark.parametrize(
    ("jcts", "region", "by"),
    [
        ((200, 100, 150, 99), "tier alone", 1.5),  # hicache within 2 % of the best
        ((200, 150, 100, 99), "dual path", 1.5),
        ((200, 100.5, 100, 99), "either", 1.005),
        ((200, 150, 120, 100), "both", 1.2),
        ((100, 150, 120, 130), "basic", 1.2),
    ],
)
def test_classify(jcts: tuple[float, ...], region: str, by: float) -> None:
    got = classify(*jcts)
    assert got is not None and got[0] == region and got[1] == pytest.approx(by)


def test_classify_needs_every_jct() -> None:
    assert classify(100, None, 90, 80) is None


def _report(jct: float, binding: str, storage_share: float | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"jct_s": jct, "bounds": {"binding": binding}}
    if storage_share is not None:
        r["tier"] = {"hit_share": {"storage": storage_share}}
    return r


def test_summary_table_and_plot(tmp_path: Path) -> None:
    """One cell with results: the table says its JCTs, region and bindings; the plot draws
    (other cells have no run: no row, and 'no run' on the map)."""
    exp = DramTier()
    results: dict[str, Any] = {
        key(ARM_660B, False, 1024, "basic", 0): _report(5000, "storage_read"),
        key(ARM_660B, False, 1024, "dualpath", 0): _report(3000, "decode"),
        key(ARM_660B, False, 1024, "hicache", 1.5e12): _report(4000, "decode", 0.25),
        key(ARM_660B, False, 1024, "dualpath+tier", 1.5e12): _report(2800, "decode", 0.1),
        key(ARM_660B, False, 2048, "basic", 0): {"error": "boom"},
    }
    s = exp.summarize(False, results)
    (table,) = s.tables
    rows = {(r[0], r[2], r[3]): r for r in table.rows}
    row = rows[("DS 660B", "1024", "1.5 TB")]
    assert row[4:8] == ["5,000", "4,000", "3,000", "2,800"]
    assert row[8] == "25.0" and row[9] == "both" and row[10] == "1.07"
    assert row[11] == "storage_read / decode / decode / decode"
    assert rows[("DS 660B", "2048", "0")][4] == "failed"
    assert ("DS 27B", "256", "0") not in rows  # no run of its own: no row
    assert ("DS 660B", "1024", "1 TB") not in rows  # only the shared tier-less runs
    assert rows[("DS 660B", "1024", "0")][8] == "—"  # hicache did not run at 0
    assert [r.paper for r in s.rows] == [10052, 5365]
    assert len(table.header) == len(row)
    assert table.header[4:8] == [f"{p} JCT (s)" for p in POLICIES]
    (plot,) = s.plots
    path = tmp_path / plot.filename
    plot.draw(path)
    assert path.stat().st_size > 10_000


def test_quick_slice_runs_for_real(tmp_path: Path) -> None:
    """The DS 27B stand-in at 4 agents: 7 real runs (a few seconds): every cell classified,
    conservation and no block lost in each run, and the tier sizes do what they say."""
    out = run_experiment(DramTier(), tmp_path, quick=True, jobs=1, console=QUIET,
                         only="^quick-ds27b-1p1d-32k-a4-")  # fmt: skip
    assert out.exit_code == 0, (out.failed, out.problems)
    runs = sorted((tmp_path / "dram-tier" / "runs").glob("*.json"))
    assert len(runs) == 7
    shares = {}
    for path in runs:
        r = json.loads(path.read_text())
        assert r["integrity"]["conservation_ok"] and r["integrity"]["blocks_lost"] == 0
        assert r["bounds"]["binding"]
        if "tier" in r:
            shares[path.stem] = r["tier"]["hit_share"]["storage"]
    assert shares["quick-ds27b-1p1d-32k-a4-hicache-dram4gb"] == 0  # the tier holds it all
    assert 0 < shares["quick-ds27b-1p1d-32k-a4-hicache-dram0.5gb"] < 1  # a part
    summary = json.loads((tmp_path / "dram-tier" / "summary.json").read_text())
    cells = [r for r in summary["tables"][0]["rows"] if r[0].startswith("DS 27B") and r[2] == "4"]
    assert len(cells) == 3 and all(r[9] != "—" for r in cells)
    assert (tmp_path / "dram-tier" / "dram_tier_regions.png").stat().st_size > 10_000
