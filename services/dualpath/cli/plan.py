"""`dualpath plan`: the capacity planner (docs/planner.md). Parses and checks the question,
builds the planner's experiment (experiments/plan.py) and runs it here (`--jobs`), or as
Kubernetes Indexed Jobs (`--emit k8s`, then `--index`/`--collect` in the pods, as
`dualpath experiment` does), then writes plan.{json,md} and prints the winner."""

from __future__ import annotations

import json
import math
import shlex
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dualpath.cli.common import check_out_path, fail
from dualpath.experiments.plan import Plan, PlanSpec
from dualpath.experiments.plan_search import parse_slo, smallest_gpus

MAX_LENS = ("32k", "48k", "64k")
OBJECTIVES = ("online", "offline")
PAPER_PRESET_PREFIX = "paper-"


def default_preset(model: str) -> str | None:
    """The paper preset of `model` (its hardware, P/D and GPUs per node), or None."""
    from dualpath.model.config.presets import load_preset, preset_names

    for name in preset_names():
        if name.startswith(PAPER_PRESET_PREFIX) and load_preset(name).get("model") == model:
            return name
    return None


def _names(model: str, gpu: str, policies: list[str]) -> None:
    from dualpath.model.policies.registry import default_registry
    from dualpath.model.roofline import ProfileError, load_gpu, load_model

    for flag, load, value in (("--model", load_model, model), ("--gpu", load_gpu, gpu)):
        try:
            load(value)
        except ProfileError as exc:
            fail(f"{flag} {value!r}: {str(exc).split('; ', 1)[-1]}")
    known = default_registry().names()
    for p in policies:
        if p not in known:
            fail(f"--policy {p!r}: unknown policy; accepted: {', '.join(known)}")


def _gpus_per_node(preset: str, given: int | None) -> int:
    from dualpath.model.config.presets import ConfigError, load_preset

    if given is not None:
        if given < 1:
            fail(f"--gpus-per-node must be at least 1, got {given}")
        return given
    try:
        topo = load_preset(preset).get("topology") or {}
    except ConfigError as exc:
        fail(str(exc))
        raise
    return int(topo.get("gpus_per_node", 8))


def build_spec(
    *, model: str, gpu: str, workload: str, slo: str, gpus_max: int, policies: list[str],
    preset: str | None, gpus_per_node: int | None, ep: list[int], dram: list[float],
    duration: float, window: float, lookback: float, offline_agents: int | None,
    objective: str, width: int,
    budget: int, probes: int, seed: int, sample_agents: int, sets: list[str],
) -> PlanSpec:  # fmt: skip
    """The question, checked flag by flag (one line naming the flag and the fix)."""
    _names(model, gpu, policies)
    if workload.lower() not in MAX_LENS:
        fail(f"--workload {workload!r}: the agents' MaxLen; accepted: {', '.join(MAX_LENS)}")
    try:
        parsed = parse_slo(slo)
    except ValueError as exc:
        fail(str(exc))
        raise
    chosen = preset or default_preset(model)
    if chosen is None:
        fail(f"--model {model}: no paper preset runs it; give --preset NAME|FILE.yaml for the "
             "hardware (see `dualpath presets`)")  # fmt: skip
        raise AssertionError
    g = _gpus_per_node(chosen, gpus_per_node)
    least = smallest_gpus(g)
    if gpus_max < least:
        fail(f"--gpus-max {gpus_max}: the smallest candidate (1P1D, {g} GPUs per node) needs "
             f"{least} GPUs; raise --gpus-max to at least {least}")  # fmt: skip
    counts = {"--width": width, "--budget": budget, "--probes": probes,
              "--sample-agents": sample_agents}  # fmt: skip
    if seed < 0:
        fail(f"--seed must be >= 0, got {seed}")
    for flag, count in counts.items():
        if count < 1:
            fail(f"{flag} must be at least 1, got {count}")
    if any(e < 0 for e in ep):
        fail(f"--ep {min(ep)}: nodes per EP group, >= 1 (0 = each side is one group)")
    if any(not (math.isfinite(d) and d >= 0) for d in dram):
        fail("--dram: bytes of host DRAM per node, >= 0 (e.g. 1.5e12)")
    for flag, secs in (("--duration", duration), ("--window", window), ("--lookback", lookback)):
        if not (math.isfinite(secs) and secs > 0):
            fail(f"{flag} must be emulated seconds > 0, got {secs}")
    if offline_agents is not None and offline_agents < 1:
        fail(f"--offline-agents must be at least 1, got {offline_agents}")
    if objective not in OBJECTIVES:
        fail(f"--objective {objective!r}: accepted: {', '.join(OBJECTIVES)}")
    if objective == "offline" and offline_agents is None:
        fail("--objective offline: give --offline-agents N (the agents of each JCT run)")
    return PlanSpec(
        model=model, gpu=gpu, workload=workload.lower(), slo=parsed, gpus_max=gpus_max,
        policies=tuple(dict.fromkeys(policies)), preset=chosen, gpus_per_node=g,
        ep_nodes=tuple(ep) or (0,), dram_bytes=tuple(dram) or (0.0,), duration_s=duration,
        window_s=window, lookback_s=lookback, offline_agents=offline_agents, width=width,
        objective=objective,
        budget=budget, probes=probes, seed=seed, sample_agents=sample_agents,
        extra_sets=tuple(sets),
    )  # fmt: skip


def spec_flags(s: PlanSpec) -> list[str]:
    """`dualpath plan` flags that ask exactly `s` (what an Indexed Job's pods run)."""
    out = ["--model", s.model, "--gpu", s.gpu, "--workload", s.workload, "--slo",
           f"ttft={s.slo.ttft_s:g},tpot={s.slo.tpot_s:g}", "--gpus-max", str(s.gpus_max),
           "--preset", s.preset, "--gpus-per-node", str(s.gpus_per_node),
           "--duration", f"{s.duration_s:g}", "--window", f"{s.window_s:g}",
           "--lookback", f"{s.lookback_s:g}", "--width", str(s.width), "--budget", str(s.budget),
           "--probes", str(s.probes), "--seed", str(s.seed),
           "--sample-agents", str(s.sample_agents)]  # fmt: skip
    out += [x for p in s.policies for x in ("--policy", p)]
    out += [x for e in s.ep_nodes if s.ep_nodes != (0,) for x in ("--ep", str(e))]
    out += [x for d in s.dram_bytes if d for x in ("--dram", f"{d:.6g}")]
    out += ["--offline-agents", str(s.offline_agents)] if s.offline_agents else []
    out += ["--objective", s.objective] if s.objective != "online" else []
    return out + [x for v in s.extra_sets for x in ("--set", v)]


def emit(plan: Plan, out: Path, stage: int, parallelism: int | None, pvc: str | None,
         image: str | None, console: Console) -> None:  # fmt: skip
    """Write OUT/plan/k8s/{job-stageS,collect-job,pvc}.yaml: stage S of the search as an
    Indexed Job (experiments/indexed.py's layout; the pods run `dualpath plan ...`)."""
    from dualpath.deploy.jobs import DEFAULT_IMAGE, DEFAULT_PVC, Sweep, sweep_files
    from dualpath.deploy.resources import pod_resources, sim_memory_mib
    from dualpath.experiments.indexed import MAX_DEFAULT_PARALLELISM
    from dualpath.experiments.outputs import atomic_write
    from dualpath.experiments.stages import stage_specs

    try:
        specs = stage_specs(plan, False, out, stage)
    except ValueError as exc:
        fail(str(exc))
        return
    if not specs:
        fail(f"--stage {stage}: no runs (every candidate was pruned); nothing to emit")
    largest = max(specs, key=lambda s: sim_memory_mib(s.scenario))
    sweep = Sweep(experiment=plan.name, quick=False, stage=stage, keys=tuple(s.key for s in specs),
                  parallelism=parallelism or min(len(specs), MAX_DEFAULT_PARALLELISM),
                  pvc=pvc or DEFAULT_PVC, image=image or DEFAULT_IMAGE,
                  resources=pod_resources("sim", largest.scenario),
                  command=("plan", *spec_flags(plan.spec)))  # fmt: skip
    argv = ["dualpath", "plan", *spec_flags(plan.spec), "--emit", "k8s", "--stage", str(stage),
            "--out", str(out)]  # fmt: skip
    folder = out / plan.name / "k8s"
    for fname, text in sweep_files(sweep, shlex.join(argv)).items():
        atomic_write(folder / fname, text)
        console.print(f"wrote {folder / fname}", highlight=False)
    console.print(f"{len(specs)} runs: kubectl apply -f {folder}/pvc.yaml -f "
                  f"{folder}/job-stage{stage}.yaml -n NS; then emit --stage {stage + 1} (the "
                  "search goes on from these results) or apply collect-job.yaml",
                  highlight=False, soft_wrap=True)  # fmt: skip


def finish(plan: Plan, out_dir: Path, results: object, wall_s: float, console: Console) -> None:
    """plan.{json,md} and the winner's line."""
    from dualpath.experiments.outputs import atomic_write
    from dualpath.experiments.plan_outputs import document, markdown

    doc = document(plan, results)  # type: ignore[arg-type]
    doc["wall_s"] = wall_s
    atomic_write(out_dir / "plan.json", json.dumps(doc, indent=1))
    atomic_write(out_dir / "plan.md", markdown(doc, wall_s))
    n, win = doc["counts"], doc["winner"]
    console.print(f"{n['candidates']} candidates: {n['run']} run ({n['probes']} probes), "
                  f"{n['pruned']} pruned, {n['stopped']} stopped, {n['over_budget']} over the "
                  f"budget; wall {wall_s:.0f} s", highlight=False)  # fmt: skip
    if win is None:
        console.print("no candidate met the SLO at any probed rate", highlight=False)
    else:
        console.print(f"winner: {win['key']} at {win['aps']:g} APS ({win['aps_per_gpu']:.4g} "
                      f"APS/GPU)\n  {win['command']}", highlight=False, soft_wrap=True)  # fmt: skip
    console.print(f"table: {out_dir / 'plan.md'}, plan.json, pareto.png", highlight=False)


def _steps(emit_: str | None, index: int | None, collect: bool, stage: int | None,
           k8s: dict[str, object]) -> None:  # fmt: skip
    """The cluster flags, as `dualpath experiment` takes them: one step at a time."""
    steps = [f for f, on in (("--emit", emit_ is not None), ("--index", index is not None),
                             ("--collect", collect)) if on]  # fmt: skip
    if len(steps) > 1:
        fail(f"{' and '.join(steps)}: give one (--emit writes the Job, its pods run --index, "
             "--collect ranks their results)")  # fmt: skip
    if emit_ is not None and emit_ != "k8s":
        fail(f"--emit {emit_!r}: accepted: k8s")
    if index is not None and index < 0:
        fail(f"--index must be >= 0 (a run of the stage, 0-based), got {index}")
    if stage is not None and (stage < 1 or not (emit_ or index is not None)):
        fail("--stage: a number >= 1, only with --emit or --index")
    given = [flag for flag, value in k8s.items() if value is not None]
    if given and emit_ is None:
        fail(f"{given[0]}: only with --emit k8s")


Opt = typer.Option


def plan(
    model: Annotated[str, Opt(help="model profile (see `dualpath roofline`)")],
    gpu: Annotated[str, Opt(help="GPU profile")],
    workload: Annotated[str, Opt(help="Table 2 agents' MaxLen: 32k, 48k or 64k")],
    gpus_max: Annotated[int, Opt(help="GPUs at most: the candidates are every P/D within it")],
    slo: Annotated[str, Opt(help="window-mean SLO, seconds")] = "ttft=4,tpot=0.05",
    policy: Annotated[list[str] | None, Opt(help="policy to plan for (repeat)")] = None,
    preset: Annotated[str | None, Opt(help="hardware preset (default: the model's)")] = None,
    gpus_per_node: Annotated[int | None, Opt(help="GPUs per node (default: the preset's)")] = None,
    ep: Annotated[list[int] | None, Opt(help="EP group sizes in nodes (repeat)")] = None,
    dram: Annotated[list[float] | None, Opt(help="tier policies: DRAM bytes/node (repeat)")] = None,
    duration: Annotated[float, Opt(help="probe length cap, emulated s")] = 3600.0,
    window: Annotated[float, Opt(help="stop-rule window, emulated s")] = 150.0,
    lookback: Annotated[float, Opt(help="steady-state look-back, emulated s")] = 1800.0,
    offline_agents: Annotated[int | None, Opt(help="also run offline JCT at N agents")] = None,
    objective: Annotated[str, Opt(help="rank by online APS, or offline N/JCT")] = "online",
    width: Annotated[int, Opt(help="candidates searched at once")] = 4,
    budget: Annotated[int, Opt(help="candidates run at most (best bounds first)")] = 8,
    probes: Annotated[int, Opt(help="probes per candidate at most")] = 6,
    seed: Annotated[int, Opt(help="random seed")] = 0,
    sample_agents: Annotated[int, Opt(help="agents sampled for the bounds")] = 64,
    set_: Annotated[list[str] | None, Opt("--set", help="any setting of every run")] = None,
    jobs: Annotated[int | None, Opt(help="worker processes (1 = in-process)")] = None,
    out: Annotated[Path, Opt(help="output root; results in OUT/plan/")] = Path("out"),
    force: Annotated[bool, Opt(help="re-run probes already on disk")] = False,
    emit_: Annotated[str | None, Opt("--emit", help="k8s: write stage S as an Indexed Job")] = None,
    stage: Annotated[int | None, Opt(help="with --emit/--index (default 1)")] = None,
    index: Annotated[int | None, Opt(help="run run INDEX of the stage (a Job's pod)")] = None,
    collect: Annotated[bool, Opt(help="run nothing: rank the results in OUT/plan/runs")] = False,
    parallelism: Annotated[int | None, Opt(help="--emit: pods at once")] = None,
    pvc: Annotated[str | None, Opt(help="--emit: the results claim")] = None,
    image: Annotated[str | None, Opt(help="--emit: the image")] = None,
) -> None:
    """Find the P/D split and node count (and EP group, DRAM tier) with the most APS per GPU
    under the SLO; prunes with the bound analysis (docs/planner.md)."""
    from dualpath.cli.progress import with_progress
    from dualpath.experiments.runner import run_experiment
    from dualpath.model.config.presets import ConfigError

    if jobs is not None and jobs < 1:
        fail(f"--jobs must be at least 1, got {jobs}")
    _steps(emit_, index, collect, stage, {"--parallelism": parallelism, "--pvc": pvc,
                                          "--image": image})  # fmt: skip
    spec = build_spec(
        model=model, gpu=gpu, workload=workload, slo=slo, gpus_max=gpus_max,
        policies=policy or ["dualpath"], preset=preset, gpus_per_node=gpus_per_node, ep=ep or [],
        dram=dram or [], duration=duration, window=window, lookback=lookback,
        offline_agents=offline_agents, objective=objective, width=width, budget=budget,
        probes=probes, seed=seed,
        sample_agents=sample_agents, sets=set_ or [],
    )  # fmt: skip
    check_out_path("--out", out, folder=True)
    console = Console()
    p = Plan(spec)
    try:
        with_progress(p.prepare, False, "bounds", "candidates")
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    if emit_ is not None or index is not None:
        if emit_ is not None:
            emit(p, out, stage or 1, parallelism, pvc, image, console)
        else:
            from dualpath.experiments.indexed import run_index

            raise typer.Exit(run_index(p, out, False, stage or 1, index or 0, force, console))
        return
    t0 = time.perf_counter()
    try:
        outcome = run_experiment(p, out, jobs=jobs, force=force, console=console, collect=collect)
    except ValueError as exc:
        fail(str(exc))
        return
    except KeyboardInterrupt:
        fail(f"interrupted; finished probes are kept in {out / p.name / 'runs'}, run the same "
             "command again to resume", code=130)  # fmt: skip
        return
    finish(p, outcome.out_dir, outcome.results, time.perf_counter() - t0, console)
    if outcome.exit_code:
        # the runner names `dualpath experiment plan`: the pods of a plan run `dualpath plan`
        again = "dualpath plan " + shlex.join(spec_flags(spec))
        problems = [x.replace("dualpath experiment plan", again) for x in outcome.problems]
        failed = [f"{len(outcome.failed)} run(s) failed"] if outcome.failed else []
        fail("; ".join([*failed, *problems]), code=1)


def register(app: typer.Typer) -> None:
    app.command(name="plan")(plan)
