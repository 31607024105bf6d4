"""`dualpath load`: Locust against a local cluster (or `--host`), web UI or headless."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand

from dualpath.cli.common import SPEEDUP_HELP, fail, validate

TRACE_FLAGS = {  # flag -> setting it stands for
    "source": "workload.source",
    "trace": "workload.trace",
    "replay": "workload.replay",
    "time_scale": "workload.time_scale",
    "trace_sessions": "workload.trace_sessions",
    "trace_requests": "workload.trace_requests",
}


class OneLineErrors(TyperCommand):
    """A malformed flag value is one line naming the flag (exit 2), like every other
    input error of this command, instead of click's usage box."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # click's UsageError family (exit code 2); typer vendors click, so match by shape
            if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
                raise
            fail(f"{exc.format_message()} (see dualpath load --help)")
            raise


def _check(ok: bool, message: str) -> None:
    if not ok:
        fail(message)


def _validate_flags(f: dict[str, Any]) -> None:
    _check(f["aps"] is None or f["aps"] > 0, "--aps must be > 0 (sessions per emulated second)")
    _check(f["users"] is None or f["users"] >= 1, "--users must be >= 1 (sessions kept running)")
    _check(
        f["aps"] is None or f["users"] is None,
        "--aps (Poisson arrivals) and --users (closed loop) exclude each other; give one",
    )
    _check(f["sessions"] >= 0, "--sessions must be >= 0 (0 = no limit)")
    _check(f["duration"] is None or f["duration"] > 0, "--duration must be > 0 wall seconds")
    _check(f["workers"] >= 0, "--workers must be >= 0 (0 = one Locust process)")
    _check(f["dialect"] in ("native", "openai"), "--dialect must be native or openai")
    _check(f["think_time"] is None or f["think_time"] >= 0, "--think-time must be >= 0 seconds")
    _check(1 <= f["web_port"] < 65536, "--web-port must be a TCP port (1-65535)")
    host = f["host"]
    _check(
        host is None or host.startswith(("http://", "https://")),
        f"--host must be a URL like http://127.0.0.1:8000, got {host!r}",
    )
    for name in ("slo_ttft", "slo_tpot_ms"):
        _check(f[name] is None or f[name] > 0, f"--{name.replace('_', '-')} must be > 0")


def _scenario(preset: str, sets: list[str], f: dict[str, Any]) -> Any:
    from dualpath.model.config.presets import ConfigError, resolve

    flags: dict[str, Any] = {}
    for name, path in TRACE_FLAGS.items():
        if f[name] is not None:
            flags.setdefault("workload", {})[path.split(".")[1]] = f[name]
    try:
        sc = resolve(preset, flags, sets)
        validate(sc, processes=True)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    return sc


def _locust_options(preset: str, sets: list[str], f: dict[str, Any], out: Path) -> dict[str, Any]:
    trace_sets = [f"{p}={f[n]}" for n, p in TRACE_FLAGS.items() if f[n] is not None]
    return {
        "preset": preset,
        "set": ",".join([*sets, *trace_sets]) or None,
        "dialect": f["dialect"],
        "arrivals": "closed" if f["users"] else "poisson",
        "aps": f["aps"],
        "concurrency": f["users"],
        "sessions": f["sessions"] or None,
        "duration": f["duration"],
        "think_time": f["think_time"],
        "speedup": f["speedup"] if f["host"] else None,  # a local cluster's is known
        "slo_ttft": f["slo_ttft"],
        "slo_tpot_ms": f["slo_tpot_ms"],
        "slo_json": str(out / "slo.json"),
        "progress_file": str(out / "progress.json"),
    }


def load(
    preset: Annotated[str, typer.Option(help="preset name or FILE.yaml")] = "smoke",
    set_: Annotated[list[str] | None, typer.Option("--set", help="path.to.key=value")] = None,
    host: Annotated[
        str | None, typer.Option(help="target this front door (URL) instead of starting one")
    ] = None,
    headless: Annotated[bool, typer.Option(help="no web UI: run, write reports, exit")] = False,
    aps: Annotated[
        float | None, typer.Option(help="Poisson arrivals, sessions/emulated s (default: preset)")
    ] = None,
    users: Annotated[int | None, typer.Option(help="closed loop: N sessions at all times")] = None,
    sessions: Annotated[int, typer.Option(help="stop after N sessions finished (0: no)")] = 0,
    duration: Annotated[float | None, typer.Option(help="stop after D wall seconds")] = None,
    dialect: Annotated[str, typer.Option(help="native (/v1/agent/turn) or openai (chat)")] = (
        "native"
    ),
    think_time: Annotated[
        float | None, typer.Option(help="emulated s between turns (default: the script's)")
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(help="workload: synthetic, synthetic-pooled, synthetic-weka, weka, mooncake"),
    ] = None,
    trace: Annotated[str | None, typer.Option(help="trace file or folder")] = None,
    replay: Annotated[str | None, typer.Option(help="trace replay: session or open-loop")] = None,
    time_scale: Annotated[float | None, typer.Option(help="multiply trace times")] = None,
    trace_sessions: Annotated[int | None, typer.Option(help="first N trace sessions")] = None,
    trace_requests: Annotated[int | None, typer.Option(help="first N trace requests")] = None,
    slo_ttft: Annotated[float | None, typer.Option(help="SLO mean TTFT, s (default 4)")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="SLO mean TPOT, ms (50)")] = None,
    workers: Annotated[int, typer.Option(help="Locust worker processes (0: one process)")] = 0,
    web_port: Annotated[int, typer.Option(help="Locust web UI port")] = 8089,
    web_host: Annotated[str, typer.Option(help="Locust web UI address")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="the cluster's HTTP API port (0 = any)")] = 8000,
    speedup: Annotated[float | None, typer.Option(help=SPEEDUP_HELP + " (default 1)")] = None,
    real_payload: Annotated[float, typer.Option(help="ship SCALE x the KV bytes")] = 0.0,
    redis_url: Annotated[str | None, typer.Option(help="use this Redis")] = None,
    out: Annotated[Path, typer.Option(help="reports: Locust CSV/HTML, slo.json, report.*")] = (
        Path("out/load")
    ),
) -> None:
    """Drive the cluster with Locust: web UI on --web-port, or --headless with reports.

    Starts a local cluster (as `dualpath up`) unless --host is given. Sessions arrive as a
    Poisson process at --aps (or --users run in a closed loop); see docs/loadgen.md."""
    f = dict(locals())  # every flag by name, before any local import adds names
    from dualpath.cli.serve import up_options
    from dualpath.loadgen.command import LocustRun
    from dualpath.loadgen.drive import LoadSpec, run_load
    from dualpath.loadgen.options import OptionError, parse_options

    sets = list(set_ or [])
    _validate_flags(f)
    sc = _scenario(preset, sets, f)
    # open-loop trace replay ends with its last session; Poisson and closed loops never do
    bounded = duration is not None or sessions > 0 or sc.workload.replay == "open-loop"
    _check(not headless or bounded, "--headless needs --duration SECONDS or --sessions N")
    options = _locust_options(preset, sets, f, out)
    try:
        parse_options(options)  # the locustfile's own checks, before anything starts
    except OptionError as exc:
        fail(str(exc))
    up = None
    if host is None:
        up = up_options(out / "cluster", http_port, speedup or 1.0, real_payload, redis_url)
    run = LocustRun(
        host or "",
        options,
        headless=headless,
        web_host=web_host,
        web_port=web_port,
        processes=workers,
        csv_prefix=out / "locust",
        html=out / "locust.html",
    )
    _report(run_load(LoadSpec(sc, run, out, up), _announce), headless, out, host)


def _announce(run: Any, cl: Any) -> None:
    console = Console()
    if cl is not None:
        from dualpath.cli.serve import endpoint_table

        console.print(endpoint_table(cl))
    if run.headless:
        console.print(f"Locust (headless) -> {run.host}", highlight=False)
    else:
        url = f"http://{run.web_host}:{run.web_port}"
        console.print(
            f"Locust web UI: {url}  (target {run.host}; Ctrl-C stops Locust"
            + (" and the cluster" if cl is not None else "")
            + ", then writes the reports)",
            highlight=False,
        )


def _report(outcome: Any, headless: bool, out: Path, host: str | None) -> None:
    from dualpath.loadgen.slo import describe
    from dualpath.report.render import summary_table

    console = Console()
    if outcome.report is not None:
        console.print(summary_table(outcome.report))
    elif host is not None:
        console.print("no cluster report: --host targets a cluster started elsewhere")
    if outcome.slo is not None:
        console.print(describe(outcome.slo), highlight=False)
    console.print(f"reports in {out}: " + ", ".join(p.name for p in outcome.files))
    p = outcome.progress
    if outcome.locust_exit not in (0, None) and not outcome.interrupted:
        first = p.get("first_error")
        if p.get("failures"):
            fail(f"{p['failures']} failed request(s); first: {first}", code=1)
        detail = f": {first}" if first else " (see its output above)"
        fail(f"Locust exited with code {outcome.locust_exit}{detail}", code=1)
    if outcome.interrupted and headless:
        fail("interrupted (Ctrl-C): Locust and the cluster stopped, reports written", code=130)


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(load)
