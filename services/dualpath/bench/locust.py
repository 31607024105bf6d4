"""`make bench` (load generation): the sessions and turns per wall second that Locust drives
through a local cluster with one Locust process and with a master + N workers, and which
side is the bottleneck.

Workload: closed-loop agent sessions of short turns (the smoke preset's trajectories with
appends and generations scaled down, no think time), so each turn costs little emulated
time and the rate is bounded by CPU: the client's (Locust is gevent, one core per process)
or the server's (five service processes). The verdict compares CPU use over the window:
a Locust process near one full core means the client is the limit; otherwise the cluster.
Run as `python -m dualpath.bench.locust`; asyncio-free (Locust runs as a subprocess).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from dualpath.loadgen.command import LocustProcess, LocustRun
from dualpath.model.config.presets import resolve
from dualpath.model.config.workload_sources import build_workload
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions, local_cluster

SHORT_TURNS = ["workload.max_len=32k", "workload.append_scale=0.1", "workload.gen_scale=0.15"]
CLIENT_SATURATED = 0.85  # of one core per Locust process: gevent runs on one thread
WARMUP_S = 3.0


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue  # exited: its time is gone, the window sample covers the rest
    return total


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _post_rows(csv_prefix: Path) -> tuple[int, int]:
    """(turns answered, failures) from Locust's request statistics."""
    path = csv_prefix.with_name(csv_prefix.name + "_stats.csv")
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["Type"] == "POST":
                return int(row["Request Count"]), int(row["Failure Count"])
    return 0, 0


def _point(
    cl: LocalCluster, workers: int, users: int, window_s: float, out: Path, turns_per_session: float
) -> dict[str, Any]:
    prefix = out / f"w{workers}"
    run = LocustRun(
        f"http://{cl.http_addr}",
        {
            "preset": "smoke",
            "set": ",".join(SHORT_TURNS),
            "arrivals": "closed",
            "concurrency": users,
            "duration": WARMUP_S + window_s,
            "think_time": 0.0,
        },
        processes=workers,
        csv_prefix=prefix,
        loglevel="WARNING",
    )
    servers = [psutil.Process(p.popen.pid) for p in cl.group.procs]
    with LocustProcess(run, log=prefix.with_suffix(".log")) as loc:
        time.sleep(WARMUP_S)
        clients = _tree(loc.pid)
        c0, s0, t0 = _cpu_s(clients), _cpu_s(servers), time.perf_counter()
        time.sleep(window_s)
        clients = _tree(loc.pid)  # workers may have been forked after the first sample
        c1, s1, wall = _cpu_s(clients), _cpu_s(servers), time.perf_counter() - t0
        code = loc.wait(60.0)
    turns, failures = _post_rows(prefix)
    locust_procs = max(1, workers)
    client_core = (c1 - c0) / wall / locust_procs
    total = WARMUP_S + window_s
    return {
        "locust_workers": workers,
        "sessions_running": users,
        "turns": turns,
        "failures": failures,
        "turns_per_wall_s": round(turns / total, 1),
        # closed-loop sessions outlive the window: sessions/s = turns/s / turns per session
        "sessions_per_wall_s": round(turns / total / turns_per_session, 2),
        "client_cpu_per_locust_process": round(client_core, 2),
        "server_cpu_cores": round((s1 - s0) / wall, 2),
        "bottleneck": "client (Locust)" if client_core >= CLIENT_SATURATED else "server (cluster)",
        "locust_exit": code,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=256, help="closed-loop sessions")
    ap.add_argument("--window", type=float, default=10.0, help="measured wall seconds")
    ap.add_argument("--dilation", type=float, default=1.0, help="emulated s per wall s")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="0 = one process")
    args = ap.parse_args()
    sc = resolve("smoke", {}, SHORT_TURNS)
    workload = build_workload(sc)
    per_session = workload.requests / len(workload.scripts)
    print(f"{psutil.cpu_count()} cores; sessions of {per_session:.0f} short turns on average")
    rows = []
    for workers in args.workers:
        with (
            tempfile.TemporaryDirectory() as tmp,
            local_cluster(sc, UpOptions(Path(tmp), http_port=0, dilation=args.dilation)) as cl,
        ):
            rows.append(_point(cl, workers, args.users, args.window, Path(tmp), per_session))
        print(json.dumps(rows[-1]), flush=True)
    one = rows[0]["turns_per_wall_s"] or 1.0
    for r in rows[1:]:
        print(f"{r['locust_workers']} workers / 1 process: {r['turns_per_wall_s'] / one:.2f}x")


if __name__ == "__main__":
    main()
