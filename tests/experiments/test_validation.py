"""The validation summary: ratios, median / worst |error|, share within ±10 %, bad rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualpath.experiments.validation import Point, csv_points, main, markdown, stats
from tests.paths import REPO


def test_stats_are_median_worst_and_share_within_ten_percent() -> None:
    pts = [Point("A", "a", 1.05, 1.0), Point("A", "b", 0.5, 1.0), Point("B", "c", 2.2, 2.0)]
    s = stats(pts)
    assert s["median_abs_error"] == pytest.approx(0.10)
    assert s["worst_abs_error"] == pytest.approx(0.5)
    assert s["within_10pct"] == pytest.approx(2 / 3)
    md = markdown(pts)
    assert "3 rows: median |error| 10.0%, worst 50.0%, within ±10 %: 67%." in md
    assert "| B | 1 | 10.0% | 10.0% | 100% |" in md  # the per-figure breakdown


def test_a_bad_cell_is_one_line_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "v.csv"
    bad.write_text("figure,what,ours,paper\nFig. 7,x,fast,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"v.csv:2: 'ours' and 'paper' must be numbers"):
        csv_points(bad)
    with pytest.raises(SystemExit) as exc:
        main([str(bad)])
    assert exc.value.code == 2


def test_the_shipped_rows_parse_and_the_plot_is_written(tmp_path: Path) -> None:
    pts = csv_points(REPO / "docs" / "validation.csv")
    assert len(pts) >= 30 and all(p.paper != 0 for p in pts)
    png = tmp_path / "v.png"
    assert main([str(REPO / "docs" / "validation.csv"), "--png", str(png)]) == 0
    assert png.stat().st_size > 10_000
