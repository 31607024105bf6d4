"""`dualpath load`: bad input is one line and exit 2 (before anything starts); a headless
run starts its own cluster and leaves Locust's reports and the cluster's report behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest
from typer.testing import CliRunner

from dualpath.cli.main import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--aps", "abc"], "--aps"),
        (["--aps", "0"], "--aps must be > 0"),
        (["--aps", "1", "--users", "2"], "exclude each other"),
        (["--users", "0"], "--users"),
        (["--headless"], "--headless needs --duration"),
        (["--duration", "-5"], "--duration"),
        (["--dialect", "grpc"], "--dialect"),
        (["--web-port", "70000"], "--web-port"),
        (["--host", "localhost:8000"], "--host must be a URL"),
        (["--preset", "nope"], "--preset"),
        (["--set", "workload.replay=sometimes"], "workload.replay"),
        (["--source", "weka"], "trace"),
        (["--workers", "-1"], "--workers"),
        (["--nope"], "--nope"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, ["load", *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_headless_load_writes_locust_and_cluster_reports(tmp_path: Path) -> None:
    out = tmp_path / "load"
    cmd = [
        sys.executable, "-m", "dualpath.cli.main", "load", "--headless", "--aps", "0.5",
        "--duration", "10", "--speedup", "4", "--http-port", "0", "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen(cmd, stdout=PIPE, stderr=PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: dualpath load stops Locust and its cluster first
        stdout, stderr = proc.communicate(timeout=60)
        pytest.fail(f"dualpath load did not finish in 150 s:\n{stdout[-2000:]}{stderr[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    names = {p.name for p in out.iterdir()}
    expected = {"locust_stats.csv", "locust.html", "slo.json", "progress.json"}
    assert expected | {"report.json", "report.md", "report.png"} <= names
    report = json.loads((out / "report.json").read_text())
    assert report["runtime"]["kind"] == "process" and report["runtime"]["dilation"] == 4.0
    assert report["requests"]["completed"] > 0 and report["integrity"]["conservation_ok"]
    assert "SLO (mean TTFT" in stdout and "reports in" in stdout
