"""`dualpath experiment NAME`: run an experiment here, or as a Kubernetes Indexed Job.

Locally (the default) the runner runs the grid in worker processes. For a cluster, three
steps: `--emit k8s` writes the stage's Indexed Job (`OUT/NAME/k8s/`), each of its pods
runs `--stage S --index I` (run I of stage S, its report in `OUT/NAME/runs/` as locally),
and `--collect` summarizes what they wrote: the same summary.{json,md,png} as a local run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from dualpath.cli.common import check_out_path, fail

if TYPE_CHECKING:
    from dualpath.experiments.base import Experiment

EMIT_TARGETS = ("k8s",)
DNS_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _check_steps(
    emit: str | None,
    index: int | None,
    collect: bool,
    stage: int | None,
    only: str | None,
    force: bool,
    k8s_flags: Mapping[str, object],
) -> None:
    """The cluster flags, before anything runs: one step at a time, each with its own flags."""
    steps = [f for f, on in (("--emit", emit is not None), ("--index", index is not None),
                             ("--collect", collect)) if on]  # fmt: skip
    if len(steps) > 1:
        fail(f"{' and '.join(steps)}: give one (--emit writes the Job, its pods run --index, "
              "--collect summarizes their results)")  # fmt: skip
    if emit is not None and emit not in EMIT_TARGETS:
        fail(f"--emit {emit!r}: accepted: {', '.join(EMIT_TARGETS)}")
    if index is not None and index < 0:
        fail(f"--index must be >= 0 (a run of the stage, 0-based), got {index}")
    if stage is not None and stage < 1:
        fail(f"--stage must be >= 1 (1 = the experiment's plan), got {stage}")
    if stage is not None and not (emit or index is not None):
        fail("--stage: only with --emit or --index (--collect walks every stage itself)")
    if steps and only is not None:
        fail(f"--only: not with {steps[0]} (a Job runs a whole stage; index i is run i)")
    if collect and force:
        fail("--force: not with --collect (it runs nothing; re-run an index with --force)")
    given = [flag for flag, value in k8s_flags.items() if value is not None]
    if given and emit is None:
        fail(f"{given[0]}: only with --emit k8s")


def _overridden(
    exp: Experiment, sets: list[str], quick: bool, emit: str | None, index: int | None,
    collect: bool,
) -> Experiment:  # fmt: skip
    """The experiment with `--set` on every run, or a one-line error naming the item."""
    from dualpath.experiments.overrides import with_overrides
    from dualpath.model.config.presets import ConfigError

    if emit is not None or index is not None or collect:
        fail("--set: local runs only (not with --emit, --index or --collect); put the "
             "setting in the image's environment (DP_SECTION__KEY=value) instead")  # fmt: skip
    try:
        return with_overrides(exp, sets, quick)
    except ConfigError as exc:
        fail(str(exc))
        raise  # (fail exits)


def experiment(
    name: Annotated[str, typer.Argument(help="experiment name, or `list` to list them")],
    quick: Annotated[
        bool, typer.Option(help="tiny scenarios (seconds): a check, NOT comparable to the paper")
    ] = False,
    jobs: Annotated[
        int | None, typer.Option(help="worker processes (default: CPU count; 1 = in-process)")
    ] = None,
    out: Annotated[Path, typer.Option(help="output root; results go to OUT/NAME/")] = Path(
        "out/experiments"
    ),
    force: Annotated[bool, typer.Option(help="re-run runs whose reports already exist")] = False,
    only: Annotated[
        str | None,
        typer.Option(help="run only the runs whose key matches this regex (others: cached or —)"),
    ] = None,
    emit: Annotated[
        str | None,
        typer.Option(help="k8s: write the stage's Indexed Job to OUT/NAME/k8s/ instead of running"),
    ] = None,
    stage: Annotated[
        int | None,
        typer.Option(help="with --emit/--index: 1 = the plan; later ones refine (default 1)"),
    ] = None,
    index: Annotated[
        int | None,
        typer.Option(help="run only run INDEX of the stage (what pod INDEX of the Job runs)"),
    ] = None,
    collect: Annotated[
        bool, typer.Option(help="run nothing: summarize the results under OUT/NAME/runs/")
    ] = False,
    parallelism: Annotated[
        int | None, typer.Option(help="--emit: pods at once (default: min(runs, 8))")
    ] = None,
    pvc: Annotated[
        str | None, typer.Option(help="--emit: the results claim (default dualpath-experiments)")
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="--emit: the image (default dualpath-testbed:dev)")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="path.to.key=value on every run (repeatable); results go to OUT/NAME+set-<id>/",
        ),
    ] = None,
) -> None:
    """Run a named experiment that reproduces a paper figure; resumes where it stopped."""
    from dualpath.experiments import experiments, run_experiment
    from dualpath.experiments.outputs import rows_table

    registry = experiments()
    # Flags first, whatever the name: a bad flag is refused the same way for `list` too.
    if jobs is not None and jobs < 1:
        fail(f"--jobs must be at least 1, got {jobs}")
    if only is not None:
        try:
            re.compile(only)
        except re.error as exc:
            fail(f"--only {only!r} is not a regular expression: {exc}")
    k8s_flags = {"--parallelism": parallelism, "--pvc": pvc, "--image": image}
    _check_steps(emit, index, collect, stage, only, force, k8s_flags)
    if parallelism is not None and parallelism < 1:
        fail(f"--parallelism must be at least 1, got {parallelism}")
    if pvc is not None and not DNS_NAME.match(pvc):
        fail(f"--pvc {pvc!r}: a claim name is lowercase letters, digits and '-' (<= 63)")
    if name == "list":
        for key, exp in registry.items():
            typer.echo(f"{key:16s} {exp.title}")
        return
    chosen = registry.get(name)
    if chosen is None:
        fail(f"unknown experiment {name!r}; accepted: list, " + ", ".join(registry))
        return
    check_out_path("--out", out, folder=True)
    sets = list(set_ or [])
    if sets:
        chosen = _overridden(chosen, sets, quick, emit, index, collect)
    console = Console()
    if emit is not None or index is not None:
        from dualpath.experiments.indexed import emit_k8s, run_index

        if emit is not None:
            emit_k8s(chosen, out, quick, stage or 1, parallelism, pvc, image, console)
        else:
            assert index is not None
            raise typer.Exit(run_index(chosen, out, quick, stage or 1, index, force, console))
        return
    try:
        outcome = run_experiment(
            chosen, out, quick=quick, jobs=jobs, force=force, console=console, only=only,
            collect=collect,
        )  # fmt: skip
    except ValueError as exc:  # a bad setting in the plan (e.g. a DP_* environment value)
        fail(str(exc))
        return
    except KeyboardInterrupt:
        fail(f"interrupted; finished runs are kept in {out / name / 'runs'}, "
              "run the same command again to resume", code=130)  # fmt: skip
        return
    console.print(rows_table(outcome))
    console.print(f"summary: {outcome.out_dir / 'summary.md'} and summary.json, plots beside them")
    if outcome.exit_code:
        failed = outcome.failed
        shown = ", ".join(failed[:3]) + (", …" if len(failed) > 3 else "")
        problems = ([f"{len(failed)} run(s) failed ({shown})"] if failed else []) + outcome.problems
        fail("; ".join(problems) + " — see summary.md", code=1)


def register(app: typer.Typer) -> None:
    """Register `experiment` (it replaces an earlier command of the same name: typer keeps
    the last one registered)."""
    app.command(name="experiment")(experiment)
