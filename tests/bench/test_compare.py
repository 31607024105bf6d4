"""The equivalence gate's verdicts (bench/compare.py) on hand-made figures: pure, no runs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from dualpath.bench.compare import (
    compare,
    compare_reports,
    diff_pct,
    integrity_problems,
    markdown,
    passed,
    spread,
)


def _report(jct: float, ttft: float = 1.0, lost: int = 0, ok: bool = True) -> dict[str, Any]:
    lat = {k: {"mean": v} for k, v in (("ttft_s", ttft), ("ttst_s", 0.1), ("tpot_s", 0.02))}
    integ = {"blocks_lost": lost, "blocks_corrupted": 0, "conservation_ok": ok}
    return {"jct_s": jct, "latency": lat, "integrity": integ}


def test_identical_seeds_pass_with_zero_diff() -> None:
    row = compare("s", "jct_s", [100.0, 102.0], [100.0, 102.0])
    assert row.ok and row.diff_pct == 0.0 and row.why == ""
    assert row.spread == pytest.approx(math.sqrt(2.0))


def test_a_mean_off_by_more_than_one_percent_fails() -> None:
    # spread 10 covers the 1.5 shift; the ±1 % does not
    row = compare("s", "jct_s", [90.0, 110.0], [91.5, 111.5])
    assert not row.ok and "> 1 %" in row.why and "spread" not in row.why
    assert row.diff_pct == pytest.approx(1.5)


def test_a_shift_inside_one_percent_but_beyond_the_seeds_spread_fails() -> None:
    row = compare("s", "jct_s", [100.0, 100.1], [100.5, 100.6])
    assert not row.ok and "spread" in row.why and "> 1 %" not in row.why


def test_one_seed_has_no_spread_so_only_the_tolerance_holds() -> None:
    assert spread([1.0], [1.0]) is None
    assert compare("s", "tpot_s", [1.0], [1.009]).ok
    assert not compare("s", "tpot_s", [1.0], [1.011]).ok


def test_diff_of_zero_means() -> None:
    assert diff_pct(0.0, 0.0) == 0.0
    assert math.isinf(diff_pct(0.0, 1.0))
    assert diff_pct(-2.0, -1.0) == pytest.approx(50.0)


def test_seed_counts_must_match() -> None:
    with pytest.raises(ValueError, match="1 old and 2 new"):
        compare("s", "jct_s", [1.0], [1.0, 2.0])


def test_integrity_problems_name_what_broke() -> None:
    assert integrity_problems(_report(1.0)) == []
    assert integrity_problems(_report(1.0, lost=3, ok=False)) == [
        "3 blocks lost",
        "bytes read from storage != bytes into prefill HBM",
    ]


def test_reports_give_one_row_per_metric_and_an_integrity_row() -> None:
    old = [_report(100.0), _report(110.0)]
    rows = compare_reports("sc", old, [_report(100.0), _report(110.0)])
    assert [r.metric for r in rows] == ["jct_s", "ttft_s", "ttst_s", "tpot_s", "integrity"]
    assert passed(rows)
    bad = compare_reports("sc", old, [_report(100.0), _report(110.0, lost=1)])
    assert not passed(bad) and bad[-1].why == "new seed #2: 1 blocks lost"
    slow = compare_reports("sc", old, [_report(100.0, ttft=2.0), _report(110.0, ttft=2.0)])
    assert [r.metric for r in slow if not r.ok] == ["ttft_s"]


def test_markdown_table_has_every_row_and_the_failure_reason() -> None:
    rows = compare_reports("sc", [_report(100.0)], [_report(103.0)])
    text = markdown(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| scenario | metric |") and len(lines) == 2 + len(rows)
    assert "| sc | jct_s | 1 | 100 | 103 | +3.000 | n/a | **FAIL**" in text
    assert passed([]) is False
