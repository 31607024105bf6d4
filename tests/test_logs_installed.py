"""Integration: a real `dualpath run` (Redis + one process per service + Locust) with
`--log-format json` and no terminal: every service says what it did, one JSON object per
line, and the launcher prints progress lines instead of staying silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

RUN_TIMEOUT_S = 240
SERVICES = ("scheduler", "storage", "prefill0", "decode0")
LIFECYCLE = ("service_start", "registered", "ready", "shutdown", "stopped")
TURN_EVENTS = ("turn_accepted", "turn_placed", "first_token", "turn_done")


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"{path.name}:{n} is not JSON ({exc}): {line!r}") from None
        assert isinstance(rec, dict), f"{path.name}:{n}: {line!r}"
        out.append(rec)
    return out


def test_json_logs_of_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DP_", "DUALPATH_"))}
    env["DUALPATH_PROGRESS_S"] = "0.5"  # the run takes seconds: several lines
    proc = subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", "run", "--preset", "smoke", "--agents", "1",
         "--speedup", "8", "--http-port", "0", "--out", str(out), "--log-format", "json"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())

    logs = tmp_path / "cluster" / "logs"
    assert sorted(p.stem for p in logs.glob("*.log")) == sorted(SERVICES)
    by_service: dict[str, list[dict[str, Any]]] = {}
    for name in SERVICES:
        recs = _lines(logs / f"{name}.log")
        assert recs, f"{name}.log is empty"
        for rec in recs:
            assert {"ts", "level", "service", "event"} <= rec.keys(), rec
            assert rec["service"] == name, rec
        events = [r["event"] for r in recs]
        for want in LIFECYCLE:
            assert want in events, f"{name}: no {want} line in {events[:10]}"
        start = next(r for r in recs if r["event"] == "service_start")
        assert start["grpc"].startswith("127.0.0.1:") and start["pid"] > 0
        by_service[name] = recs

    # one line per turn and stage in the scheduler's log, each naming the request id
    ids: dict[str, set[int]] = defaultdict(set)
    for rec in by_service["scheduler"]:
        if rec["event"] in TURN_EVENTS:
            ids[rec["event"]].add(rec["request_id"])
    done = ids["turn_done"]
    assert len(done) == report["requests"]["completed"] > 0
    for ev in TURN_EVENTS:
        assert ids[ev] == done, f"{ev}: {sorted(ids[ev] ^ done)[:5]}"
    placed = [r for r in by_service["scheduler"] if r["event"] == "turn_placed"]
    assert {r["path"] for r in placed} <= {"pe", "de"}
    # no per-chunk or per-block volume: a node logs its lifecycle, not its traffic
    assert all(len(by_service[n]) < 20 for n in ("storage", "prefill0", "decode0"))

    # no terminal: progress lines on stderr instead of silence
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("run: ")]
    assert progress, proc.stderr[-2000:]
    assert "turns" in progress[-1] and "emulated" in progress[-1]
