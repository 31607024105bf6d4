"""`dualpath load`: a local cluster (or `--host`) + Locust as a subprocess + the reports.

Asyncio side (it starts the cluster): never imported by the locustfile. Outputs in `out`:
Locust's `locust_stats.csv` (+ history, failures, exceptions), `locust.html`, `slo.json`,
`progress.json`, and, when this command started the cluster, the cluster's
`report.{json,md,png}` (the contract of `dualpath run`).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dualpath.loadgen.command import LocustProcess, LocustRun, read_json
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions, local_cluster

POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class LoadSpec:
    sc: Scenario
    run: LocustRun  # host is filled in when this command starts the cluster
    out: Path
    up: UpOptions | None  # None: --host, a cluster started elsewhere


@dataclass(slots=True)
class LoadOutcome:
    locust_exit: int
    interrupted: bool
    progress: dict[str, Any]
    slo: dict[str, Any] | None
    report: dict[str, Any] | None = None
    files: list[Path] = field(default_factory=list)


def _interrupt(_sig: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a load like Ctrl-C: reports first, then down


OnReady = Callable[[LocustRun, "LocalCluster | None"], None]


def run_load(spec: LoadSpec, on_ready: OnReady) -> LoadOutcome:
    """Run Locust until it exits (headless: its sessions or --duration end it; web UI: Ctrl-C
    or SIGTERM here), then write the reports. KeyboardInterrupt never escapes."""
    spec.out.mkdir(parents=True, exist_ok=True)
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if spec.up is None:
            return _drive(spec, spec.run, None, on_ready)
        with local_cluster(spec.sc, spec.up) as cl:
            # Locust replays the cluster's own resolved scenario: exactly these scripts.
            options = {**spec.run.options, "preset": str(spec.up.run_dir / "scenario.yaml")}
            options.pop("set", None)
            options.setdefault("speedup", spec.up.dilation)
            run = replace(spec.run, host=f"http://{cl.http_addr}", options=options)
            return _drive(spec, run, cl, on_ready)
    finally:
        signal.signal(signal.SIGTERM, old)


def _drive(
    spec: LoadSpec,
    run: LocustRun,
    cl: LocalCluster | None,
    on_ready: OnReady,
) -> LoadOutcome:
    started = time.perf_counter()
    interrupted = False
    proc = LocustProcess(run)
    try:
        on_ready(run, cl)
        while proc.poll() is None:
            if cl is not None:
                cl.tick()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        code = proc.stop()  # SIGINT: Locust writes its HTML report and final CSV rows
    ended = time.perf_counter()
    progress = read_json(spec.out / "progress.json") or {}
    outcome = LoadOutcome(code, interrupted, progress, read_json(spec.out / "slo.json"))
    if cl is not None and progress.get("turns_done"):
        first = float(progress.get("wall_first") or 0)
        wall = ended - first if 0 < first < ended else ended - started
        outcome.report = _cluster_report(spec, cl, started, wall, progress)
    outcome.files = sorted(p for p in spec.out.iterdir() if p.is_file())
    return outcome


def _cluster_report(
    spec: LoadSpec, cl: LocalCluster, started: float, wall: float, progress: dict[str, Any]
) -> dict[str, Any]:
    from dualpath.report.plots import write_png
    from dualpath.report.render import markdown_report
    from dualpath.runtimes.process.launcher.run import finish_run

    report = finish_run(spec.sc, cl, started, wall, int(progress.get("turns_done") or 0))
    out = spec.out / "report.json"
    out.write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(markdown_report(report, out.with_suffix(".png").name))
    write_png(report, out.with_suffix(".png"))
    return report
