"""The demo agent workload of `dualpath run`: a headless Locust run of the same user class
as `dualpath load` (one agent driver in the project), through the HTTP front door exactly as
an external client would (the native agent-turn endpoint).

Offline mode, as `dualpath sim`: every script of the scenario starts at its `start_s` (all
at once for synthetic agents) and runs its whole trajectory; the run ends when every session
finished (`--arrivals scripted`), or at the first failed turn (`--fail-fast`). Progress
comes from Locust's progress record; Locust's CSV statistics and log stay in `out_dir`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dualpath.loadgen.command import LocustProcess, LocustRun, read_json

POLL_S = 0.2


class WorkloadError(RuntimeError):
    """The cluster refused or failed a turn: the message carries the server's reason."""


@dataclass(frozen=True, slots=True)
class DriveResult:
    turns: int  # turns answered
    sessions: int  # sessions that ran to their end
    wall_s: float  # first session start -> last session end (Locust's clock)
    progress: dict[str, Any]


def drive_agents(
    http_addr: str,
    scenario_file: Path,
    out_dir: Path,
    dilation: float,
    on_turn: Callable[[int, int], None] | None = None,
    turn_timeout_s: float = 3600.0,
    check: Callable[[], None] | None = None,
    tolerate_failures: bool = False,
) -> DriveResult:
    """Run every agent of the scenario once (offline) with Locust; raise WorkloadError if
    any turn failed (unless `tolerate_failures`: a run with faults on purpose, whose failed
    turns the report counts). `check` is called while waiting (e.g. raise if a service
    died)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    progress_file = out_dir / "progress.json"
    progress_file.unlink(missing_ok=True)
    run = LocustRun(
        host=f"http://{http_addr}",
        options={
            "preset": str(scenario_file),
            "arrivals": "scripted",
            "speedup": dilation,
            "turn_timeout": turn_timeout_s,
            "progress_file": str(progress_file),
            "fail_fast": not tolerate_failures,
        },
        csv_prefix=out_dir / "locust",
        loglevel="WARNING",
    )
    log = out_dir / "locust.log"
    started = time.perf_counter()
    with LocustProcess(run, log) as proc:
        shown = 0
        while proc.poll() is None:
            record = read_json(progress_file) or {}
            done = int(record.get("turns_done") or 0)
            if on_turn is not None:
                # one call per turn, as a per-turn callback would get (hooks may sample)
                for k in range(shown + 1, done + 1):
                    on_turn(k, int(record.get("turns_total") or 0))
            shown = max(shown, done)
            if check is not None:
                check()
            time.sleep(POLL_S)
        code = proc.stop()
    record = read_json(progress_file) or {}
    # With faults on purpose, failed turns are expected: Locust exits 1 for them.
    failed = (record.get("sessions_failed") or code != 0) and not tolerate_failures
    if record.get("state") != "complete" or failed:
        reason = record.get("first_error") or f"Locust exited with code {code}"
        raise WorkloadError(f"{reason} (Locust log: {log})")
    turns = int(record.get("turns_done") or 0)
    if on_turn is not None:
        for k in range(shown + 1, turns + 1):
            on_turn(k, int(record.get("turns_total") or turns))
    first, last = float(record.get("wall_first") or 0), float(record.get("wall_last") or 0)
    wall = last - first if last > first > 0 else time.perf_counter() - started
    return DriveResult(turns, int(record.get("sessions_done") or 0), wall, record)
