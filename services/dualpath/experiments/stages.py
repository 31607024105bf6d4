"""An experiment's grid as numbered stages, for runs made elsewhere (a Kubernetes Indexed
Job, docs/deployment.md): stage 1 is `plan()`, stage s+1 is what `more()` asks for given
every result of stages 1..s, exactly as the local runner walks them. Index i of a stage is
its i-th run. Results are the runner's own files, `OUT/NAME/runs/KEY.json` (a report) or
`KEY.error.txt` (a failed run's traceback), wherever they were written.
"""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments.base import Experiment, Report, RunSpec
from dualpath.experiments.cache import SharedIndex, load_cached
from dualpath.experiments.outputs import Outcome, RunRecord


class StageError(ValueError):
    """A stage that cannot be known (yet): the message names the flag and what to do."""


def unique(specs: list[RunSpec], name: str) -> None:
    seen: set[str] = set()
    for s in specs:
        if s.key in seen:
            raise ValueError(f"experiment {name}: duplicate run key {s.key!r}")
        seen.add(s.key)


def error_of(spec: RunSpec, runs_dir: Path) -> str | None:
    """A failed run's message, as the runner records it (`Type: message`, the traceback's
    last line), or None."""
    try:
        text = (runs_dir / f"{spec.key}.error.txt").read_text(encoding="utf-8")
    except OSError:
        return None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "failed (empty error file)"


def result_of(spec: RunSpec, runs_dir: Path, index: SharedIndex) -> Report | None:
    """The run's report (its own file, or an identical scenario's), its error, or None."""
    report = load_cached(runs_dir / f"{spec.key}.json", spec) or index.find(spec)
    if report is not None:
        return report
    err = error_of(spec, runs_dir)
    return None if err is None else {"error": err}


def stage_specs(exp: Experiment, quick: bool, out: Path, stage: int) -> list[RunSpec]:
    """The runs of `stage` (1-based). A later stage needs every result of the earlier ones
    under `out` (the runner's output root)."""
    runs_dir = out / exp.name / "runs"
    index = SharedIndex(out)
    specs = exp.plan(quick)
    unique(specs, exp.name)
    results: dict[str, Report] = {}
    for s in range(1, stage):
        for spec in specs:
            report = result_of(spec, runs_dir, index)
            if report is None:
                raise StageError(
                    f"--stage {stage}: run {spec.key} of stage {s} has no result under "
                    f"{runs_dir}; finish stage {s} first (or copy its results there)"
                )
            results[spec.key] = report
        nxt = [x for x in exp.more(quick, results) if x.key not in results]
        unique(nxt, exp.name)
        if not nxt:
            raise StageError(
                f"--stage {stage}: {exp.name} needs no stage {s + 1} after these results "
                f"(it has {s}); run `dualpath experiment {exp.name} --collect` instead"
            )
        specs = nxt
    return specs


def collect_stage(todo: list[RunSpec], runs_dir: Path, o: Outcome) -> list[RunSpec]:
    """`--collect`: record the failed runs among those without a report (their error
    files) and return the ones with no result at all. Reports found earlier by `reuse`
    were written by the Job's pods: they are marked `collected`, not `cached`."""
    for rec in o.records.values():
        if rec.status == "cached":
            rec.status = "collected"
    missing = []
    for spec in todo:
        err = error_of(spec, runs_dir)
        if err is None:
            missing.append(spec)
        else:
            o.records[spec.key] = RunRecord(spec, {"error": err}, "failed")
    return missing
