"""`dualpath serve | up | run`: the process runtime's commands (registered on the main app)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dualpath.cli.common import SPEEDUP_HELP, check_out_path, fail, validate
from dualpath.cli.serve_checks import (
    check_flags,
    check_local_cluster,
    check_redis_answers,
    check_tokenizer,
    log_settings,
)

ROLE_HELP = "scheduler, storage, prefill or decode"
TOKEN_FILE_HELP = (
    "file holding the run's shared token (else $DUALPATH_TOKEN); needed to bind a "
    "non-loopback --host, and then required on every gRPC call and on /metrics"
)
INSECURE_HELP = "allow a non-loopback --host without a token (anyone who reaches it may call it)"
LOG_FORMAT_HELP = "log lines: text or json (else $DUALPATH_LOG_FORMAT, else text)"
LOG_LEVEL_HELP = "debug, info, warning or error (else $DUALPATH_LOG_LEVEL, else info)"
LogFormat = Annotated[str | None, typer.Option(help=LOG_FORMAT_HELP)]
LogLevel = Annotated[str | None, typer.Option(help=LOG_LEVEL_HELP)]


FAULT_HELP = "KIND[:TARGET[.LINK=GBPS]]@AT[+FOR], emulated s (repeat; docs/faults.md)"
TOKENIZER_HELP = (
    "count prompts and spell the output with this tokenizer: a tokenizer.json, its folder, or "
    "a model in the local Hugging Face cache (sets frontdoor.tokenizer; nothing is downloaded)"
)
Tokenizer = Annotated[str | None, typer.Option(help=TOKENIZER_HELP)]
Policy = Annotated[str | None, typer.Option(help="scheduling policy name (policy.name)")]


def _scenario(
    preset: str,
    set_: list[str] | None,
    agents: int | None = None,
    fault: list[str] | None = None,
    tokenizer: str | None = None,
    load_tokenizer: bool = True,
    policy: str | None = None,
) -> Any:
    from dualpath.model.config.presets import ConfigError, resolve

    flags: dict[str, Any] = {"workload": {"agents": agents}} if agents is not None else {}
    if policy is not None:  # as `dualpath sim --policy` (--set policy.name=... wins)
        flags["policy"] = {"name": policy}
    if fault:
        flags["faults"] = {"schedule": fault}
    if tokenizer is not None:
        # absolute, so services started elsewhere (another cwd, a container) find it too
        local = Path(tokenizer).expanduser()
        flags["frontdoor"] = {"tokenizer": str(local.resolve()) if local.exists() else tokenizer}
    try:
        sc = resolve(preset, flags, set_ or [])
        validate(sc, processes=True)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    check_tokenizer(sc, load_tokenizer)
    return sc


def serve(
    role: Annotated[str, typer.Argument(help=ROLE_HELP)],
    node: Annotated[int, typer.Option(help="node index (prefill/decode)")] = 0,
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    set_: Annotated[list[str] | None, typer.Option("--set", help="path.to.key=value")] = None,
    redis_url: Annotated[str, typer.Option(help="the run's Redis")] = "redis://127.0.0.1:6379/0",
    run_id: Annotated[str, typer.Option(help="namespace of this run in Redis")] = "default",
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0 = any free)")] = 0,
    admin_port: Annotated[int, typer.Option(help="/healthz + /metrics port (0 = any)")] = 0,
    http_port: Annotated[int, typer.Option(help="scheduler: OpenAI-compatible API port")] = 8000,
    epoch: Annotated[float | None, typer.Option(help="perf_counter() of emulated t=0")] = None,
    speedup: Annotated[float, typer.Option(help=SPEEDUP_HELP)] = 1.0,
    real_payload: Annotated[
        float, typer.Option(help="ship SCALE x the KV bytes (0 = virtual)")
    ] = 0.0,
    token_file: Annotated[Path | None, typer.Option(help=TOKEN_FILE_HELP)] = None,
    insecure: Annotated[bool, typer.Option(help=INSECURE_HELP)] = False,
    tokenizer: Tokenizer = None,
    log_format: LogFormat = None,
    log_level: LogLevel = None,
) -> None:
    """Run one service of the emulated cluster (one process per node)."""
    import logging

    import uvloop

    from dualpath.logs import configure, event
    from dualpath.runtimes.process.control import RedisUnavailable, validate_run_id
    from dualpath.runtimes.process.serving.fence import FENCED_EXIT, LeaseExpiredError
    from dualpath.runtimes.process.serving.host import StartupError
    from dualpath.runtimes.process.serving.host import serve as serve_service
    from dualpath.runtimes.process.serving.options import ServeOptions, load_token
    from dualpath.runtimes.process.serving.roles import factory

    log = logging.getLogger("dualpath.serve")
    fmt, level = log_settings(log_format, log_level)
    try:  # first: a refused bind must not cost a scenario load, let alone a socket
        token = load_token(token_file)
    except ValueError as exc:
        fail(str(exc))
        return
    sc = _scenario(preset, set_, tokenizer=tokenizer, load_tokenizer=False)
    ports = {"--grpc-port": grpc_port, "--admin-port": admin_port, "--http-port": http_port}
    check_flags(speedup, real_payload, ports, redis_url)
    if epoch is not None and not math.isfinite(epoch):
        fail(f"--epoch {epoch}: must be a finite perf_counter() reading")
    nodes = {"prefill": sc.topology.prefill_nodes, "decode": sc.topology.decode_nodes}
    if role in nodes and not 0 <= node < nodes[role]:
        fail(f"--node {node}: the scenario has {role} nodes 0..{nodes[role] - 1}")
    try:
        validate_run_id(run_id)
    except ValueError as exc:
        fail(f"--run-id: {exc}")
    try:
        opts = ServeOptions(
            role=role, redis_url=redis_url, run_id=run_id, node=node, host=host,
            grpc_port=grpc_port, admin_port=admin_port, http_port=http_port, epoch=epoch,
            dilation=speedup, real_payload=real_payload, token=token, insecure=insecure,
        )  # fmt: skip
    except ValueError as exc:
        fail(str(exc))
        return
    configure(opts.name, fmt, level)
    try:
        uvloop.run(serve_service(opts, sc, factory(role)))
    except (StartupError, RedisUnavailable, ValueError) as exc:
        # one log line (JSON in json mode), not a second message in another format
        event(log, "service_failed", logging.ERROR, error=str(exc), exit_code=1)
        raise typer.Exit(1) from None
    except LeaseExpiredError as exc:
        event(log, "fence_exit", logging.ERROR, error=str(exc), exit_code=FENCED_EXIT)
        raise typer.Exit(FENCED_EXIT) from None
    except KeyboardInterrupt:
        pass


def _logging_for(fmt: str | None, level: str | None) -> dict[str, str]:
    """`up`/`run`: the launcher logs in the chosen format too, and hands it to every
    service (UpOptions fields)."""
    from dualpath.logs import configure

    fmt, level = log_settings(fmt, level)
    configure("launcher", fmt, level)
    return {"log_format": fmt, "log_level": level}


def up_options(run_dir: Path, http_port: int, speedup: float, real_payload: float,
                redis_url: str | None, run_dir_flag: str = "--run-dir",
                pass_token: bool = True) -> Any:  # fmt: skip
    """Checked options of a local cluster; `run_dir_flag`: the flag that chose `run_dir`.
    `pass_token`: hand $DUALPATH_TOKEN (if set) to the services, through their environment."""
    from dualpath.runtimes.process.launcher.local import UpOptions
    from dualpath.runtimes.process.serving.options import load_token

    check_flags(speedup, real_payload, {"--http-port": http_port}, redis_url)
    token = None
    if pass_token:
        try:  # checked once here rather than failing in every service
            token = load_token(None)
        except ValueError as exc:
            fail(str(exc))
    check_out_path(run_dir_flag, run_dir, folder=True)
    if redis_url is not None:
        check_redis_answers(redis_url)  # last: the only check that waits
    return UpOptions(run_dir, http_port, speedup, real_payload, redis_url, token=token)


def endpoint_table(cl: Any) -> Table:
    from dualpath.runtimes.process.launcher.run import endpoints

    table = Table(title="dualpath cluster (Ctrl-C stops it)", show_header=False)
    for k, v in endpoints(cl):
        table.add_row(k, v)
    return table


def up(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    set_: Annotated[list[str] | None, typer.Option("--set", help="path.to.key=value")] = None,
    policy: Policy = None,
    fault: Annotated[list[str] | None, typer.Option(help=FAULT_HELP)] = None,
    http_port: Annotated[int, typer.Option(help="OpenAI-compatible API port")] = 8000,
    speedup: Annotated[float, typer.Option(help=SPEEDUP_HELP)] = 1.0,
    real_payload: Annotated[float, typer.Option(help="ship SCALE x the KV bytes")] = 0.0,
    redis_url: Annotated[
        str | None, typer.Option(help="use this Redis (default: start one)")
    ] = None,
    run_dir: Annotated[Path, typer.Option(help="logs and the resolved scenario")] = Path(
        "out/cluster"
    ),
    restart: Annotated[
        str, typer.Option(help="a service that exits: never, on-failure or always restarted")
    ] = "on-failure",
    max_restarts: Annotated[
        int, typer.Option(help="restarts per service per minute before the cluster stops")
    ] = 5,
    tokenizer: Tokenizer = None,
    log_format: LogFormat = None,
    log_level: LogLevel = None,
) -> None:
    """Start Redis, storage, scheduler and one process per node; serve until Ctrl-C."""
    import dataclasses

    from dualpath.runtimes.process.control import RedisUnavailable
    from dualpath.runtimes.process.launcher.procs import ClusterStartError, Restart, RestartPolicy
    from dualpath.runtimes.process.launcher.run import serve_until_signal

    modes = [m.value for m in Restart]
    if restart not in modes:
        fail(f"--restart: expected one of {', '.join(modes)}, got {restart!r}")
    if not 0 <= max_restarts <= 1000:
        fail(f"--max-restarts: expected 0 to 1000, got {max_restarts}")
    logs = _logging_for(log_format, log_level)
    sc = _scenario(preset, set_, fault=fault, tokenizer=tokenizer, policy=policy)
    check_local_cluster(sc)
    opts = up_options(run_dir, http_port, speedup, real_payload, redis_url)
    restarts = RestartPolicy(Restart(restart), max_restarts)
    opts = dataclasses.replace(opts, restart=restarts, **logs)
    try:
        serve_until_signal(sc, opts, lambda cl: Console().print(endpoint_table(cl)))
    except (ClusterStartError, RedisUnavailable) as exc:
        fail(str(exc), code=1)
    except KeyboardInterrupt:
        Console(stderr=True).print("stopped: every service exited, ports freed")


def run(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    agents: Annotated[int | None, typer.Option(help="number of agents")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="path.to.key=value")] = None,
    policy: Policy = None,
    fault: Annotated[list[str] | None, typer.Option(help=FAULT_HELP)] = None,
    out: Annotated[Path, typer.Option(help="JSON report (+ .md, .png beside it)")] = Path(
        "out/report.json"
    ),
    http_port: Annotated[int, typer.Option(help="OpenAI-compatible API port")] = 8000,
    speedup: Annotated[float, typer.Option(help=SPEEDUP_HELP)] = 4.0,
    real_payload: Annotated[float, typer.Option(help="ship SCALE x the KV bytes")] = 0.0,
    redis_url: Annotated[
        str | None, typer.Option(help="use this Redis (default: start one)")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar or table")] = False,
    tokenizer: Tokenizer = None,
    log_format: LogFormat = None,
    log_level: LogLevel = None,
) -> None:
    """Local cluster + the demo agent workload through the HTTP API + report, then stop."""
    import dataclasses

    from dualpath.cli.progress import with_progress
    from dualpath.loadgen.demo import WorkloadError
    from dualpath.report.plots import write_png
    from dualpath.report.render import markdown_report, summary_table
    from dualpath.runtimes.process.control import RedisUnavailable
    from dualpath.runtimes.process.launcher.procs import ClusterStartError
    from dualpath.runtimes.process.launcher.run import run_workload

    logs = _logging_for(log_format, log_level)
    sc = _scenario(preset, set_, agents, fault, tokenizer, policy=policy)
    check_local_cluster(sc)
    check_out_path("--out", out)
    # $DUALPATH_TOKEN (if set) guards the services as for `dualpath up`; the report is
    # gathered with it (runtimes/process/launcher/collect.py).
    opts = up_options(out.parent / "cluster", http_port, speedup, real_payload, redis_url, "--out")
    opts = dataclasses.replace(opts, **logs)
    try:
        outcome = with_progress(
            lambda hook: run_workload(sc, opts, hook), quiet, "run", "turns", opts.dilation
        )
    except (ClusterStartError, RedisUnavailable) as exc:
        fail(str(exc), code=1)
        return
    except WorkloadError as exc:
        fail(f"the run failed: {exc} (service logs: {opts.run_dir / 'logs'})", code=1)
        return
    except KeyboardInterrupt:
        fail("interrupted (Ctrl-C): cluster stopped, no report written", code=130)
        return
    report = outcome.report
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(markdown_report(report, out.with_suffix(".png").name))
    write_png(report, out.with_suffix(".png"))
    if not quiet:
        Console().print(summary_table(report))
        Console().print(f"report: {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')}")
    if not report["integrity"]["conservation_ok"]:
        fail("integrity check failed: see the report's integrity section", code=1)


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(up)
    app.command()(run)
