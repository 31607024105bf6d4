"""`make bench`'s driver on a tiny run: every figure it prints is there and consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dualpath.bench.virtual import main, units


def test_bench_prints_the_host_reference_and_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--agents", "8", "--scale", "0", "--units-scale", "0", "--no-links"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("host: ") and "sim: " in printed
    res = json.loads(out.read_text())
    ref = res["host"]["reference_s"]
    base = res["base"]
    assert ref > 0 and base["turns"] > 0 and base["emulated_s"] > 0
    assert base["scenario"] == "2P4D/8"
    assert base["emulated_s_per_cpu_s"] == pytest.approx(base["emulated_s"] / base["cpu_s"], 0.1)
    # The counted work a turn: a turn moves KV in several flows, whose starts and ends
    # re-share (at most one re-share each), and its decode runs in some chunk.
    assert base["flows_per_turn"] == round(base["flows"] / base["turns"], 2)
    assert 1 <= base["reshares_per_turn"] <= base["flows_per_turn"] * 2
    assert base["link_recomputations_per_turn"] >= 1
    assert base["decode_chunks_per_turn"] > 0
    assert "units" not in res and "pair" not in res


def test_units_keep_the_load_per_unit_and_give_ratios_over_one_unit() -> None:
    res = units(0.001, [], counts=(1, 2))  # 2 agents per unit: 2P4D/2, 4P8D/4
    assert res["agents_per_unit"] == 2
    first, second = res["runs"]
    assert first["scenario"].startswith("1 unit: 2P4D/2 48K")
    assert second["scenario"].startswith("2 units: 4P8D/4 48K")
    (r,) = res["ratios"]
    per_turn = [f["cpu_s"] / f["turns"] for f in (first, second)]
    assert r["per_turn_cost_ratio_cpu"] == pytest.approx(per_turn[1] / per_turn[0], rel=0.1)
    work = r["work_per_turn"]
    assert set(work) == {
        "flows_ratio",
        "reshares_ratio",
        "link_recomputations_ratio",
        "decode_chunks_ratio",
    }
    for key, value in work.items():  # the counts are exact: only rounding separates them
        name = key.removesuffix("_ratio") + "_per_turn"
        assert value == pytest.approx(second[name] / first[name], rel=0.02), key
