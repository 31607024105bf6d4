"""Locust's web UI: the options are in its custom-parameter form, a run started through its
web API (`POST /swarm`, form values as a browser sends them) fills `/stats/requests`,
emulated EMU rows included; `POST /stop` stops it."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from dualpath.loadgen.command import LocustProcess, LocustRun, wait_for
from dualpath.runtimes.process.launcher.local import LocalCluster
from dualpath.runtimes.process.launcher.procs import log_tail
from tests.loadgen.conftest import free_port, host_of


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def _post(url: str, form: dict[str, str] | None = None) -> dict[str, Any]:
    data = urllib.parse.urlencode(form or {}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data), timeout=10) as resp:
        answer: dict[str, Any] = json.load(resp)
        return answer


def _up(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


def test_web_ui_swarm_fills_stats_with_emulated_rows(cluster: LocalCluster, tmp_path: Path) -> None:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    log = tmp_path / "locust.log"
    run = LocustRun(host_of(cluster), {"aps": 0.2}, headless=False, web_port=port)
    with LocustProcess(run, log) as proc:
        assert wait_for(lambda: _up(ui) or proc.poll() is not None, 30), log_tail(log)
        assert proc.poll() is None, log_tail(log)
        page = _get(ui)
        for option in ("aps", "dialect", "arrivals", "concurrency", "preset"):
            assert f'"{option}"' in page  # in the custom-parameter form
        started = _post(f"{ui}/swarm", {"aps": "0.5", "dialect": "native", "sessions": "0"})
        assert started["success"], started
        stats: dict[str, Any] = {}

        def rows_in() -> bool:
            stats.update(json.loads(_get(f"{ui}/stats/requests")))
            names = {(s["method"], s["name"]): s["num_requests"] for s in stats["stats"]}
            return names.get(("EMU", "TTFT"), 0) > 0 and names.get(("EMU", "TPOT"), 0) > 0

        t0 = time.monotonic()
        assert wait_for(rows_in, 60, interval_s=0.5), log_tail(log)
        rows = {(s["method"], s["name"]): s for s in stats["stats"]}
        print(
            f"\nweb UI: EMU rows after {time.monotonic() - t0:.1f} s, users "
            f"{stats['user_count']}, turns {rows[('POST', '/v1/agent/turn')]['num_requests']}"
        )
        assert stats["state"] == "running" and stats["user_count"] > 0
        assert rows[("POST", "/v1/agent/turn")]["num_failures"] == 0
        assert rows[("EMU", "TTFT")]["avg_response_time"] > 0
        _post(f"{ui}/stop")
        assert wait_for(lambda: json.loads(_get(f"{ui}/stats/requests"))["state"] == "stopped", 30)
