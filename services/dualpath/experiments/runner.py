"""Run an experiment: execute its RunSpecs (in worker processes), cache each report as
`OUT/NAME/runs/KEY.json`, summarize, write summary.{json,md} and the PNGs.

Resumable: a run whose report is already on disk (for the same scenario) is not re-run
unless `force`; a failed run is recorded ({"error": ...}), the others go on, and it is
retried on the next invocation. Ctrl-C cancels the pending runs; finished ones are kept.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from dualpath.experiments.base import Experiment, Report, RunSpec, Summary
from dualpath.experiments.cache import SharedIndex, reuse
from dualpath.experiments.extract import jct
from dualpath.experiments.outputs import Outcome, RunRecord, atomic_write, write_outputs
from dualpath.experiments.stages import collect_stage
from dualpath.experiments.stages import unique as _unique
from dualpath.model.config.settings import Scenario

MAX_STAGES = 64  # bound on plan + more() stages (a refinement that never converges)


def _simulate(scenario: Scenario, key: str = "") -> tuple[Report, float]:
    """Worker entry point (module level, so that it pickles)."""
    from dualpath.runtimes.virtual import sim  # looked up at call time: tests may patch it

    t0 = time.perf_counter()
    report = sim.simulate(scenario, _InRun(key, scenario.workload.mode) if key else None)
    return report, time.perf_counter() - t0


IN_RUN_EVERY_S = 60.0  # wall seconds between two progress lines inside one run


class _InRun:
    """One plain line on stderr per minute of a long run (a paper-scale run takes an hour;
    the per-run lines alone would be silent all that time). Not on a terminal, where the
    bar over the runs is live and stray lines would tear it."""

    def __init__(self, key: str, mode: str) -> None:
        self.key, self.mode = key, mode
        self.t0 = self.last = time.monotonic()
        self.quiet = sys.stderr.isatty()

    def __call__(self, done: int, total: int, emulated_s: float) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < IN_RUN_EVERY_S:
            return
        self.last = now
        wall = now - self.t0
        if self.mode == "online":  # (emulated s, cap)
            what = f"emulated {done:,} of at most {total:,} s"
        else:
            what = f"{done:,}/{total:,} turns, emulated {emulated_s:,.0f} s"
        sys.stderr.write(f"  {self.key}: {what}, wall {wall:,.0f} s\n")
        sys.stderr.flush()


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which cancels and terminates them cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class RunLog:
    """Progress: a rich bar over the runs on a terminal, else one plain line per run."""

    def __init__(self, console: Console, bar: bool, name: str) -> None:
        self.console = console
        self.done = 0
        self.total = 0
        self.progress: Progress | None = None
        if bar:
            self.progress = Progress(
                TextColumn(f"[bold]{name}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("runs"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self.task = self.progress.add_task(name, total=0)
            self.progress.start()

    def say(self, text: str) -> None:
        target = self.progress.console if self.progress is not None else self.console
        target.print(text, highlight=False, soft_wrap=True)

    def add(self, n: int) -> None:
        self.total += n
        if self.progress is not None:
            self.progress.update(self.task, total=self.total)

    def finished(self, rec: RunRecord) -> None:
        self.done += 1
        if rec.error is not None:
            what = f"FAILED: {rec.error}"
        else:
            value = jct(rec.report)
            what = f"JCT {value:,.1f} s" if value is not None else "done"
        self.say(f"[{self.done}/{self.total}] {rec.spec.key}: {what} ({rec.wall_s:.1f} s wall)")
        if self.progress is not None:
            self.progress.update(self.task, completed=self.done)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class RunExecutor:
    """Runs a stage's runs (in `jobs` worker processes) and records each: its report (and
    the shared index entry) or its error file. `dualpath experiment --index` runs one."""

    def __init__(self, runs_dir: Path, jobs: int, log: RunLog, index: SharedIndex) -> None:
        self.runs_dir = runs_dir
        self.jobs = jobs
        self.log = log
        self.index = index

    def _record(self, spec: RunSpec, report: Report | None, exc: BaseException | None,
                wall: float) -> RunRecord:  # fmt: skip
        err_file = self.runs_dir / f"{spec.key}.error.txt"
        if exc is not None or report is None:
            msg = f"{type(exc).__name__}: {exc}" if exc is not None else "no report"
            text = "".join(traceback.format_exception(exc)) if exc is not None else msg
            atomic_write(err_file, text)
            rec = RunRecord(spec, {"error": msg}, "failed", wall)
        else:
            path = self.runs_dir / f"{spec.key}.json"
            atomic_write(path, json.dumps(report, indent=1))
            self.index.publish(spec, path)
            err_file.unlink(missing_ok=True)
            rec = RunRecord(spec, report, "ran", wall)
        self.log.finished(rec)
        return rec

    def run(self, specs: list[RunSpec]) -> Iterable[RunRecord]:
        if not specs:
            return
        if self.jobs == 1:
            for spec in specs:
                t0 = time.perf_counter()
                try:
                    report, wall = _simulate(spec.scenario, spec.key)
                except Exception as exc:
                    yield self._record(spec, None, exc, time.perf_counter() - t0)
                else:
                    yield self._record(spec, report, None, wall)
            return
        ctx = multiprocessing.get_context("spawn")  # no inherited event loops or threads
        before = set(multiprocessing.active_children())
        pool = ProcessPoolExecutor(
            max_workers=min(self.jobs, len(specs)), mp_context=ctx, initializer=_ignore_sigint
        )
        restore = _sigterm_raises()
        try:
            futures: dict[Future[tuple[Report, float]], RunSpec] = {
                pool.submit(_simulate, s.scenario, s.key): s for s in specs
            }
            for fut in as_completed(futures):
                spec = futures[fut]
                try:
                    report, wall = fut.result()
                except Exception as exc:
                    yield self._record(spec, None, exc, 0.0)
                else:
                    yield self._record(spec, report, None, wall)
        except BaseException:  # Ctrl-C (or a consumer error): drop what has not started
            pool.shutdown(wait=False, cancel_futures=True)
            for child in set(multiprocessing.active_children()) - before:
                child.terminate()  # this pool's workers (they ignore SIGINT): stop the runs
            raise
        finally:
            restore()
        pool.shutdown()


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the runner: stop as on Ctrl-C, workers included."""


def _sigterm_raises() -> Callable[[], None]:
    """While a pool runs, SIGTERM raises in the parent as Ctrl-C does, so the pool's
    workers are terminated with it: by default SIGTERM ends the parent at once and its
    spawned workers run on, orphaned. Returns what puts the old handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers; its own are kept

    def handler(signum: int, frame: object) -> None:
        raise Terminated(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)

    return restore


def run_experiment(
    exp: Experiment,
    out: Path,
    *,
    quick: bool = False,
    jobs: int | None = None,
    force: bool = False,
    console: Console | None = None,
    bar: bool | None = None,
    only: str | None = None,
    collect: bool = False,
) -> Outcome:
    """Run `exp` into `out/NAME/` and return the outcome (`exit_code` 1 if anything failed).
    `jobs`: worker processes (default: CPU count; 1 = inline, in this process). `bar`:
    rich progress bar (default: when the console is a terminal). `only`: a regular
    expression; runs whose key does not match are not run (their cached reports are still
    used), to run a slice of a long sweep. `collect`: run nothing, summarize the results
    that runs made elsewhere left in `out/NAME/runs` (an Indexed Job's pods, through
    `--index`); a stage with runs missing ends the walk and is named in `problems`."""
    console = console or Console()
    n_jobs = max(1, jobs if jobs is not None else (os.cpu_count() or 1))
    outcome = Outcome(exp, quick, n_jobs, out / exp.name)
    runs_dir = outcome.out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    log = RunLog(console, console.is_terminal if bar is None else bar, exp.name)
    index = SharedIndex(out)
    executor = RunExecutor(runs_dir, n_jobs, log, index)
    t0 = time.perf_counter()
    planned: list[str] = []  # every stage's keys in plan order: the summary's run order
    try:
        specs = exp.plan(quick)
        _unique(specs, exp.name)
        for stage in range(1, MAX_STAGES + 1):
            planned += [s.key for s in specs]
            todo = [s for s in specs if force or not reuse(s, runs_dir, index, outcome)]
            if collect:
                missing = collect_stage(todo, runs_dir, outcome)
                if missing:
                    outcome.problems.append(_missing(outcome, stage, specs, missing, out))
                    break
                todo = []
            elif len(todo) < len(specs):
                log.say(f"{len(specs) - len(todo)} run(s) reused from {out}")
            if only is not None:
                skipped = [s for s in todo if not re.search(only, s.key)]
                todo = [s for s in todo if re.search(only, s.key)]
                if skipped:
                    log.say(f"{len(skipped)} run(s) left out by --only {only!r}")
            log.add(len(todo))
            for rec in executor.run(todo):
                outcome.records[rec.spec.key] = rec
            try:
                nxt = exp.more(quick, outcome.results)
            except Exception as exc:
                outcome.problems.append(f"more() failed: {type(exc).__name__}: {exc}")
                break
            _unique(nxt, exp.name)
            specs = [s for s in nxt if s.key not in outcome.records]
            if not specs:
                break
        else:
            outcome.problems.append(f"more() still asked for runs after {MAX_STAGES} stages")
    finally:
        log.close()
    # Runs finish in any order with several workers; list them as planned, so a summary
    # does not depend on which worker was faster (nor on running here or in pods).
    rank = {k: i for i, k in enumerate(planned)}
    outcome.records = dict(
        sorted(outcome.records.items(), key=lambda kv: rank.get(kv[0], len(rank)))
    )
    _finish(outcome)
    outcome.wall_s = time.perf_counter() - t0
    write_outputs(outcome)
    return outcome


def _missing(o: Outcome, stage: int, specs: list[RunSpec], missing: list[RunSpec],
             out: Path) -> str:  # fmt: skip
    """`--collect`: which runs of which stage have no result, and the command that runs them."""
    name = o.experiment.name + (" --quick" if o.quick else "")
    keys = {s.key for s in missing}
    indices = [i for i, s in enumerate(specs) if s.key in keys]
    shown = ", ".join(f"{i} ({specs[i].key})" for i in indices[:5])
    more = ", …" if len(indices) > 5 else ""
    step = (
        f"emit its Job: `dualpath experiment {name} --emit k8s --stage {stage} --out {out}`"
        if len(missing) == len(specs)
        else f"run them: `dualpath experiment {name} --stage {stage} --index I --out {out}`"
    )
    return (
        f"stage {stage}: {len(missing)} of {len(specs)} run(s) have no result yet "
        f"(index {shown}{more}); {step}, then collect again"
    )


def _finish(o: Outcome) -> None:
    """Summarize and draw; a failure here is reported, never loses the runs."""
    try:
        o.summary = o.experiment.summarize(o.quick, o.results)
    except Exception as exc:
        o.problems.append(f"summarize failed: {type(exc).__name__}: {exc}")
        o.summary = Summary()
    for plot in o.summary.plots:
        path = o.out_dir / plot.filename
        try:
            plot.draw(path)
            o.pngs.append(path)
        except Exception as exc:
            o.problems.append(f"plot {plot.filename} failed: {type(exc).__name__}: {exc}")
