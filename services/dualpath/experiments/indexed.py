"""The two cluster-side steps of `dualpath experiment`: `--emit k8s` (the stage as an
Indexed Job, `dualpath.deploy.jobs`) and `--index I` (what pod I runs: run I of the stage,
recorded exactly as the local runner records it, so that `--collect` and a later local
invocation both find it)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.console import Console

from dualpath.cli.common import fail
from dualpath.experiments.base import Experiment, RunSpec
from dualpath.experiments.cache import SharedIndex, reuse
from dualpath.experiments.outputs import Outcome, atomic_write
from dualpath.experiments.runner import RunExecutor, RunLog
from dualpath.experiments.stages import stage_specs

MAX_DEFAULT_PARALLELISM = 8


def _stage(exp: Experiment, out: Path, quick: bool, stage: int) -> list[RunSpec]:
    try:
        return stage_specs(exp, quick, out, stage)
    except ValueError as exc:  # StageError, or a bad setting in the plan (a DP_* value)
        fail(str(exc))
        raise  # not reached: fail exits


def run_index(exp: Experiment, out: Path, quick: bool, stage: int, index: int, force: bool,
              console: Console) -> int:  # fmt: skip
    """Run run `index` of `stage` into `out/NAME/runs/` (reusing a report already there,
    as the local runner would, unless `force`). Returns the exit code: 1 if the run failed
    (its error file is written; the Job retries the index once)."""
    specs = _stage(exp, out, quick, stage)
    if index >= len(specs):
        fail(f"--index {index}: stage {stage} of {exp.name}{' (quick)' if quick else ''} has "
              f"{len(specs)} runs, 0..{len(specs) - 1}")  # fmt: skip
    spec = specs[index]
    outcome = Outcome(exp, quick, 1, out / exp.name)
    runs_dir = outcome.out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    shared = SharedIndex(out)
    if not force and reuse(spec, runs_dir, shared, outcome):
        console.print(f"{exp.name} stage {stage} index {index}: {spec.key} already done "
                      f"({outcome.records[spec.key].status})", highlight=False)  # fmt: skip
        return 0
    log = RunLog(console, False, exp.name)
    log.add(1)
    rec = next(iter(RunExecutor(runs_dir, 1, log, shared).run([spec])))
    return 1 if rec.error is not None else 0


def _resources_for(specs: list[RunSpec]) -> dict[str, Any]:
    """One size for every pod of the Job: the largest run's (`sim` sizing)."""
    from dualpath.deploy.resources import pod_resources, sim_memory_mib

    largest = max(specs, key=lambda s: sim_memory_mib(s.scenario))
    return pod_resources("sim", largest.scenario)


def emit_k8s(exp: Experiment, out: Path, quick: bool, stage: int, parallelism: int | None,
             pvc: str | None, image: str | None, console: Console) -> None:  # fmt: skip
    """Write `out/NAME/k8s/{job-stageS,collect-job,pvc}.yaml` for `stage`."""
    from dualpath.deploy.jobs import DEFAULT_IMAGE, DEFAULT_PVC, Sweep, sweep_files

    specs = _stage(exp, out, quick, stage)
    sweep = Sweep(
        experiment=exp.name,
        quick=quick,
        stage=stage,
        keys=tuple(s.key for s in specs),
        parallelism=parallelism or min(len(specs), MAX_DEFAULT_PARALLELISM),
        pvc=pvc or DEFAULT_PVC,
        image=image or DEFAULT_IMAGE,
        resources=_resources_for(specs),
    )
    argv = ["dualpath", "experiment", *sweep.flags(), "--emit", "k8s", "--out", str(out)]
    if stage != 1:
        argv[4:4] = ["--stage", str(stage)]
    for flag, value in (("--parallelism", parallelism), ("--pvc", pvc), ("--image", image)):
        argv += [flag, str(value)] if value is not None else []
    folder = out / exp.name / "k8s"
    for fname, text in sweep_files(sweep, shlex.join(argv)).items():
        atomic_write(folder / fname, text)
        console.print(f"wrote {folder / fname}", highlight=False)
    console.print(
        f"{len(specs)} runs, {sweep.parallelism} at a time: kubectl apply -f {folder}/pvc.yaml "
        f"-f {folder}/job-stage{stage}.yaml -n NS; when it completes, kubectl apply -f "
        f"{folder}/collect-job.yaml -n NS (or copy {sweep.pvc}:/results/{exp.name}/runs to "
        f"{out / exp.name / 'runs'} and run `dualpath experiment {' '.join(sweep.flags())} "
        f"--collect --out {out}`)",
        highlight=False, soft_wrap=True,
    )  # fmt: skip
