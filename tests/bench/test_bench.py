"""`make bench`'s driver on a tiny run: every figure it prints is there and consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dualpath.bench.virtual import main


def test_bench_prints_the_host_reference_and_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["--agents", "8", "--scale", "0", "--no-links", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("host: ") and "sim: " in printed
    res = json.loads(out.read_text())
    ref = res["host"]["reference_s"]
    base = res["base"]
    assert ref > 0 and base["turns"] > 0 and base["emulated_s"] > 0
    assert base["scenario"] == "2P4D/8"
