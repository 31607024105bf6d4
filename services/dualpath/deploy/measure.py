"""Measure what each process of a local cluster uses, to size Kubernetes pods from data.

`python -m dualpath.deploy.measure [--max-wall S] run|load ARGS...`

Runs `dualpath run ARGS` (local cluster + the scenario's agents, all at once, + report) or
`dualpath load ARGS` (local cluster + Locust: Poisson sessions at --aps for --duration),
one process per service as one pod each on Kubernetes, and samples every process of the
tree with psutil: peak RSS,
mean CPU (CPU seconds / the process's wall lifetime) and peak CPU (over any 5 s window).
Processes are grouped by role from their command line (`serve ROLE`, `redis-server`,
`locust`); a role with several processes (one per node) reports its largest. With
`--max-wall` the run is interrupted (SIGINT, as Ctrl-C) after S wall seconds: paper-scale
scenarios take hours, and memory grows with stored blocks, so read those as a lower bound.
Prints JSON; the numbers used by `dualpath.deploy.resources` are quoted there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import psutil

SAMPLE_S = 0.5
WINDOW_S = 5.0  # peak CPU: over this window, so one busy sample does not count as a core


@dataclass
class _Track:
    role: str
    start: float
    rss_peak: int = 0
    cpu_s: float = 0.0
    last: float = 0.0
    cpu_peak: float = 0.0  # cores, over WINDOW_S
    window: deque[tuple[float, float]] = field(default_factory=deque)


def role_of(cmdline: list[str]) -> str:
    """`python -m dualpath serve decode --node 1 ...` -> decode; redis-server; locust."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg == "serve":
            return cmdline[i + 1]
    text = " ".join(cmdline)
    if "redis-server" in text:
        return "redis"
    if "locust" in text:
        return "locust"
    return "launcher"


def _sample(root: psutil.Process, tracks: dict[int, _Track], now: float) -> None:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            with p.oneshot():
                rss = p.memory_info().rss
                times = p.cpu_times()
                cmd = p.cmdline()
        except psutil.Error:
            continue
        t = tracks.get(p.pid)
        if t is None:
            t = tracks[p.pid] = _Track(role_of(cmd), start=now)
        t.rss_peak = max(t.rss_peak, rss)
        t.cpu_s = times.user + times.system
        t.last = now
        t.window.append((now, t.cpu_s))
        while t.window and now - t.window[0][0] > WINDOW_S:
            t.window.popleft()
        span = now - t.window[0][0]
        if span >= WINDOW_S * 0.8:
            t.cpu_peak = max(t.cpu_peak, (t.cpu_s - t.window[0][1]) / span)


def summarize(tracks: dict[int, _Track]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for t in tracks.values():
        wall = max(t.last - t.start, SAMPLE_S)
        row = out.setdefault(t.role, {"processes": 0, "rss_peak_mib": 0.0, "cpu_mean_cores": 0.0,
                                      "cpu_peak_cores": 0.0})  # fmt: skip
        row["processes"] += 1
        row["rss_peak_mib"] = max(row["rss_peak_mib"], round(t.rss_peak / 2**20, 1))
        row["cpu_mean_cores"] = max(row["cpu_mean_cores"], round(t.cpu_s / wall, 3))
        row["cpu_peak_cores"] = max(row["cpu_peak_cores"], round(t.cpu_peak, 3))
    return out


def measure(run_args: list[str], max_wall: float | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "dualpath", *run_args]
    t0 = time.perf_counter()
    # stderr to a file, not a pipe: a pipe nobody reads until the end fills up and blocks
    # the run (progress lines) while it is being measured
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf,
                                start_new_session=True)  # fmt: skip
        root = psutil.Process(proc.pid)
        tracks: dict[int, _Track] = {}
        interrupted = False
        while proc.poll() is None:
            now = time.perf_counter() - t0
            _sample(root, tracks, now)
            if max_wall is not None and now > max_wall and not interrupted:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the run stops its cluster
                interrupted = True
            time.sleep(SAMPLE_S)
        errf.seek(0)
        err = errf.read()
    return {
        "command": " ".join(["dualpath", *run_args]),
        "wall_s": round(time.perf_counter() - t0, 1),
        "exit_code": proc.returncode,
        "interrupted_after_s": max_wall if interrupted else None,
        "cpus": os.cpu_count(),
        "roles": summarize(tracks),
        "stderr_tail": err.decode(errors="replace")[-400:] if proc.returncode else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-wall", type=float, default=None, help="interrupt after S seconds")
    ap.add_argument("command", choices=["run", "load"], help="the dualpath subcommand to run")
    args, rest = ap.parse_known_args()  # the rest goes to `dualpath run|load`
    print(json.dumps(measure([args.command, *rest], args.max_wall), indent=1))


if __name__ == "__main__":
    main()
