"""`dualpath sim`: one scenario on the virtual-time runtime, its report and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from dualpath.cli.common import check_out_path, fail, validate
from dualpath.cli.progress import with_progress
from dualpath.model.config.presets import ConfigError, resolve


def _flag_overrides(**flags: Any) -> dict[str, Any]:
    """Map the convenience flags onto settings paths (None = not given)."""
    paths = {
        "model": "model",
        "gpu": "gpu",
        "seed": "seed",
        "prefill_nodes": "topology.prefill_nodes",
        "decode_nodes": "topology.decode_nodes",
        "gpus_per_node": "topology.gpus_per_node",
        "agents": "workload.agents",
        "max_len": "workload.max_len",
        "policy": "policy.name",
        "aps": "online.aps",
        "trace": "workload.trace",
        "trace_format": "workload.source",
        "replay": "workload.replay",
        "time_scale": "workload.time_scale",
        "trace_sessions": "workload.trace_sessions",
        "fault": "faults.schedule",
    }
    out: dict[str, Any] = {}
    for flag, value in flags.items():
        if value is None:
            continue
        node = out
        *parents, leaf = paths[flag].split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def sim(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    model: Annotated[str | None, typer.Option(help="model profile name or YAML")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU profile name or YAML")] = None,
    prefill_nodes: Annotated[int | None, typer.Option(help="prefill nodes (P)")] = None,
    decode_nodes: Annotated[int | None, typer.Option(help="decode nodes (D)")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node")] = None,
    agents: Annotated[int | None, typer.Option(help="number of agents")] = None,
    max_len: Annotated[str | None, typer.Option(help="max agent context: 32k, 48k, 64k")] = None,
    policy: Annotated[str | None, typer.Option(help="scheduling policy name")] = None,
    aps: Annotated[
        float | None, typer.Option(help="online mode: Poisson agent arrivals per second")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    trace: Annotated[
        str | None, typer.Option(help="replay a trace (file or folder) instead of Table 2 agents")
    ] = None,
    trace_format: Annotated[
        str | None, typer.Option(help="weka or mooncake (default: from the trace's name)")
    ] = None,
    replay: Annotated[str | None, typer.Option(help="session (default) or open-loop")] = None,
    time_scale: Annotated[
        float | None, typer.Option(help="multiply every trace time (think, arrival)")
    ] = None,
    trace_sessions: Annotated[
        int | None, typer.Option(help="replay only the trace's first N sessions")
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(help="degrade:NODE.snic|cnic=GBPS@AT[+FOR] (repeat; docs/faults.md)"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the JSON report here")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="any setting: path.to.key=value")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar or table")] = False,
) -> None:
    """Run a scenario on virtual time (one process) and report JCT, latencies, I/O.

    Offline by default (all agents start together, JCT); `--aps X` (or
    `--set workload.mode=online`) serves Poisson arrivals under the paper's stop rule.
    `--trace PATH` replays a WEKA or Mooncake trace (docs/traces.md)."""
    from dualpath.model.blocks import BlockCorrupted, BlockMissing
    from dualpath.model.engines.capacity import CapacityError
    from dualpath.model.faults.spec import virtual_faults_only
    from dualpath.model.workload.traces import TraceError, detect_format
    from dualpath.report.plots import write_png
    from dualpath.report.render import markdown_report, summary_table
    from dualpath.runtimes.cluster import TopologyError
    from dualpath.runtimes.virtual.sim import simulate

    flags = _flag_overrides(
        model=model, gpu=gpu, seed=seed, prefill_nodes=prefill_nodes, decode_nodes=decode_nodes,
        gpus_per_node=gpus_per_node, agents=agents, max_len=max_len, policy=policy, aps=aps,
        trace=trace, trace_format=trace_format, replay=replay, time_scale=time_scale,
        trace_sessions=trace_sessions, fault=fault,
    )  # fmt: skip
    if aps is not None:
        flags.setdefault("workload", {})["mode"] = "online"
    try:
        if trace is not None and trace_format is None:
            flags["workload"]["source"] = detect_format(Path(trace))
        sc = resolve(preset, flags, set_ or [])
        validate(sc)
        virtual_faults_only(sc.faults.schedule)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
        return
    if out is not None:
        check_out_path("--out", out)
    unit = "emulated s" if sc.workload.mode == "online" else "turns"
    try:
        report = with_progress(lambda hook: simulate(sc, hook), quiet, "sim", unit)
    except (TopologyError, CapacityError, TraceError) as exc:
        fail(str(exc))
        return
    except (BlockCorrupted, BlockMissing) as exc:
        fail(f"integrity check failed: {exc}", code=1)
        return
    except KeyboardInterrupt:
        fail("interrupted (Ctrl-C): no report written", code=130)
        return
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        out.with_suffix(".md").write_text(markdown_report(report, out.with_suffix(".png").name))
        write_png(report, out.with_suffix(".png"))
    if not quiet:
        Console().print(summary_table(report))
        if out is not None:
            Console().print(f"report: {out}, {out.with_suffix('.md')}, {_pngs(report, out)}")


def _pngs(report: dict[str, Any], out: Path) -> str:
    """The PNG files written beside `out` (TTFT and timeline charts when turns finished)."""
    from dualpath.report.plots import breakdown_png_name, timeline_png_name

    png = out.with_suffix(".png")
    names = [png]
    if report.get("ttft_breakdown", {}).get("n"):
        names.append(png.with_name(breakdown_png_name(png.name)))
    if report.get("timeline", {}).get("windows"):
        names.append(png.with_name(timeline_png_name(png.name)))
    return ", ".join(map(str, names))


def register(app: typer.Typer) -> None:
    app.command()(sim)
