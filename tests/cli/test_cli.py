"""The CLI as a user runs it: subprocesses, exit codes, one-line errors, the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dualpath.cli.main import app
from tests.polling import wait_until


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_sim_smoke_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = _run("sim", "--preset", "smoke", "--agents", "4", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["schema"] == "dualpath.report/v1"
    assert report["scenario"]["workload"]["agents"] == 4
    assert (tmp_path / "r.md").read_text().startswith("# DualPath testbed run")
    assert "JCT (emulated)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "gpt-9"], "accepted: "),
        (["--gpu", "tpu"], "accepted: "),
        (["--policy", "magic"], "accepted: "),
        (["--max-len", "lots"], "--max-len"),
        (["--prefill-nodes", "0"], "topology.prefill_nodes"),
        (["--set", "hardware.snic_gbps=0"], "hardware.snic_gbps"),
        (["--set", "hardware.wat=1"], "hardware.wat"),
        (["--preset", "nope"], "accepted: "),
        (["--model", "deepseek-v3.2", "--prefill-nodes", "1", "--gpus-per-node", "1"], "HBM"),
        (["--aps", "0"], "online.aps"),
        (["--set", "workload.mode=batch"], "workload.mode"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], needle: str) -> None:
    proc = _run("sim", "--preset", "smoke", *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


def test_roofline_json_rows() -> None:
    proc = _run("roofline", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {"model", "context", "append", "gb_per_pflop"} <= set(rows[0])
    v32 = [r for r in rows if r["model"] == "deepseek-v3.2" and r["context"] == 32721]
    assert v32 and v32[0]["gb_per_pflop"] == pytest.approx(22, rel=0.1)


def test_corrupted_block_exit_code(tmp_path: Path) -> None:
    proc = _run("sim", "--preset", "smoke", "--agents", "2", "--set", "faults.corrupt_blocks=1")
    assert proc.returncode == 1
    assert "integrity check failed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sim_online_with_aps(tmp_path: Path) -> None:
    out = tmp_path / "on.json"
    proc = _run("sim", "--preset", "smoke", "--aps", "0.1", "--set", "online.window_s=20",
                "--set", "online.lookback_s=40", "--set", "online.max_duration_s=80",
                "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["mode"] == "online"
    assert report["online"]["aps"] == 0.1
    assert "online APS / agents" in proc.stdout
    assert "online APS" in (tmp_path / "on.md").read_text()


# `dualpath ARGS` exec'd with SIGINT ignored, as `cmd &` in a shell without job control (or a
# CI runner started that way) starts it: an ignored signal stays ignored across exec.
SIGINT_IGNORED = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, '-m', 'dualpath', *sys.argv[1:]])"
)


def test_ctrl_c_stops_a_run_cleanly() -> None:
    import os
    import re
    import signal
    import threading

    proc = subprocess.Popen(
        # Started with SIGINT ignored, the CLI takes it back: Ctrl-C still stops the run.
        [sys.executable, "-c", SIGINT_IGNORED, "sim", "--preset", "paper-ds660b-2p4d"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DUALPATH_PROGRESS_S": "0.2"},  # a progress line on stderr
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    # a paper-scale run takes minutes: once turns complete, the interrupt lands mid-run
    mid_run = re.compile(r"^sim: [1-9][0-9]*/")
    wait_until(
        lambda: any(mid_run.match(line) for line in lines) or proc.poll() is not None,
        timeout=120,
        interval=0.1,
        what="the run's first completed turns",
    )
    assert proc.poll() is None, "".join(lines)
    proc.send_signal(signal.SIGINT)
    # generous: on a loaded 2-core machine cancelling a paper-scale run's tasks is slow
    proc.wait(timeout=180)
    reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 130
    assert "interrupted" in err
    assert "Traceback" not in err and "Event loop is closed" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve", "bogus"], "ROLE"),
        (["run", "--speedup", "0"], "--speedup"),
        (["up", "--http-port", "70000"], "--http-port"),
        (["run", "--preset", "nope"], "--preset"),
        (["serve", "storage", "--redis-url", "redis://127.0.0.1:1/0"], "Redis does not answer"),
    ],
)
def test_bad_cluster_input_is_one_line_not_a_traceback(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (1, 2), res.output
    assert needle in res.output and "Traceback" not in res.output
