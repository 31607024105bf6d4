"""`dualpath cluster ...`: control and break a running compose cluster (docker-compose.yml)
through the Docker Engine API (services/dualpath/deploy/containers/, docs/containers.md)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from dualpath.cli.common import MAX_SPEEDUP, SPEEDUP_HELP, fail

if TYPE_CHECKING:
    from dualpath.deploy.containers.control import Cluster

cluster_app = typer.Typer(
    no_args_is_help=True,
    help="Control a running compose cluster and break it on purpose (the Docker Engine API "
    "at $DOCKER_HOST; docs/containers.md).",
)

Project = Annotated[
    str,
    typer.Option(
        "--project", "-p", envvar="COMPOSE_PROJECT_NAME", help="compose project (its `name:`)"
    ),
]
Node = Annotated[
    str, typer.Argument(metavar="NODE", help="compose service, e.g. decode0, prefill0, redis")
]
CONTAINER_FAULT_HELP = (
    "KIND[:NODE]@AT[+FOR], emulated s from now: kill, pause, redis-drop, partition "
    "(repeat; docs/containers.md)"
)


def _fail(msg: str, code: int = 2) -> NoReturn:
    fail(msg, code)
    raise AssertionError  # (unreachable: fail raises typer.Exit)


def _connect(project: str) -> Cluster:
    from dualpath.deploy.containers.control import Cluster, ControlError

    try:
        return Cluster.connect(project)
    except ControlError as exc:
        _fail(str(exc))


def _act(project: str, action: Callable[[Cluster], str]) -> None:
    from dualpath.deploy.containers.control import ControlError

    cluster = _connect(project)
    try:
        print(action(cluster))
    except ControlError as exc:
        _fail(str(exc))


def _check_seconds(flag: str, value: float, limit: float = 86_400.0) -> None:
    if not (math.isfinite(value) and 0 <= value <= limit):
        _fail(f"{flag} {value}: must be 0 to {limit:g} seconds")


@cluster_app.command()
def status(
    project: Project = "dualpath",
    as_json: Annotated[bool, typer.Option("--json", help="one JSON list instead")] = False,
) -> None:
    """Each service's container: state, health, partitioned, restarts."""
    from dualpath.deploy.containers.control import ControlError

    cluster = _connect(project)
    try:
        rows = cluster.status()
    except ControlError as exc:
        _fail(str(exc))
    if as_json:
        keys = ("service", "container", "state", "health", "partitioned", "restarts", "exit_code")
        print(json.dumps([{k: getattr(r, k) for k in keys} for r in rows]))
        return
    table = Table(title=f"compose project {project}", box=box.SIMPLE_HEAD)
    for col in ("service", "container", "state", "health", "partitioned", "restarts"):
        table.add_column(col, justify="right" if col == "restarts" else "left")
    for r in rows:
        state = r.state if r.exit_code is None else f"{r.state} ({r.exit_code})"
        table.add_row(
            r.service, r.container, state, r.health, "yes" if r.partitioned else "no",
            str(r.restarts),
        )  # fmt: skip
    console = Console()
    # not a terminal (a script's pipe): rich would fit 80 columns and cut container names
    (console if console.is_terminal else Console(width=120)).print(table)


@cluster_app.command()
def kill(node: Node, project: Project = "dualpath") -> None:
    """SIGKILL the node's container; it stays down until `start` (or `restart`)."""
    _act(project, lambda c: c.kill(node))


@cluster_app.command()
def start(node: Node, project: Project = "dualpath") -> None:
    """Start the node's stopped container."""
    _act(project, lambda c: c.start(node))


@cluster_app.command()
def pause(node: Node, project: Project = "dualpath") -> None:
    """Freeze the node's container (a hung node) until `unpause`."""
    _act(project, lambda c: c.pause(node))


@cluster_app.command()
def unpause(
    node: Node,
    project: Project = "dualpath",
    watch: Annotated[
        float, typer.Option(help="s to watch it after: fenced (exit 75) -> started again")
    ] = 5.0,
) -> None:
    """Unpause the node's container; if it fenced itself (exit 75), see it started again.

    An engine node paused past its 3 s heartbeat lease exits 75 as it resumes; the engine's
    restart policy starts it again, or else this command does, within --watch seconds."""
    _check_seconds("--watch", watch, 600)
    _act(project, lambda c: c.unpause(node, watch_s=watch))


@cluster_app.command()
def restart(
    node: Node,
    project: Project = "dualpath",
    timeout: Annotated[int, typer.Option(help="s after SIGTERM before SIGKILL")] = 15,
) -> None:
    """Stop (SIGTERM, then SIGKILL after --timeout) and start the node's container."""
    _check_seconds("--timeout", timeout, 600)
    _act(project, lambda c: c.restart(node, timeout_s=timeout))


@cluster_app.command()
def partition(node: Node, project: Project = "dualpath") -> None:
    """Disconnect the node's container from the project's networks until `heal`."""
    _act(project, lambda c: c.partition(node))


@cluster_app.command()
def heal(node: Node, project: Project = "dualpath") -> None:
    """Reconnect a partitioned node with its address and its DNS alias (the service name)."""
    _act(project, lambda c: c.heal(node))


@cluster_app.command()
def faults(
    fault: Annotated[list[str] | None, typer.Option(help=CONTAINER_FAULT_HELP)] = None,
    speedup: Annotated[float, typer.Option(help=SPEEDUP_HELP + " (the cluster's)")] = 1.0,
    project: Project = "dualpath",
    as_json: Annotated[bool, typer.Option("--json", help="print the log as JSON")] = False,
) -> None:
    """Run a fault schedule against the containers; exits 1 if a fault was not applied."""
    from dualpath.deploy.containers.faults import ContainerFaults, check_services, parse_all, run
    from dualpath.model.faults.spec import FaultError

    if not fault:
        _fail("give at least one --fault, e.g. --fault pause:decode0@5+10")
    if not (math.isfinite(speedup) and 0 < speedup <= MAX_SPEEDUP):
        _fail(f"--speedup {speedup}: must be > 0 and <= {MAX_SPEEDUP:,.0f} (the cluster's)")
    try:
        schedule = parse_all(fault)
    except FaultError as exc:
        _fail(str(exc))
    cluster = _connect(project)
    try:
        check_services(schedule, cluster.by_service())
    except FaultError as exc:
        _fail(str(exc))
    cf = ContainerFaults(schedule, cluster, time.monotonic(), speedup)

    def show(e: dict[str, Any]) -> None:
        if not as_json:
            print(f"t={e['t_s']:8.2f} s  {e['event']:8} {e['fault']}: {e['detail']}", flush=True)

    try:
        log = run(cf, on_event=show)
    except KeyboardInterrupt:
        _fail("interrupted: the faults in force that have an end were ended", code=130)
    if as_json:
        print(json.dumps(log, indent=1))
    if cf.failed:
        _fail(f"{cf.failed} fault event(s) not applied (above)", code=1)


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
