"""One service process: the composition root of `dualpath serve ROLE` (docs/services.md).

Lifecycle (docs/services.md, Supervision and Robustness): tie the process to its launcher
(lifeline.py), build the core objects, start the gRPC server with the health service
(NOT_SERVING until every peer is known), the admin/HTTP app, register in Redis with a TTL
heartbeat, wait for the whole run to register, serve; on SIGTERM/SIGINT (or the launcher's
death) flip health to NOT_SERVING, deregister, stop the shell, give in-flight RPCs `grace_s`,
close; every step has a deadline.

While serving, Redis is optional: the membership watch keeps the last read through an outage
(runtimes/process/control/watch.py), the heartbeat and the event buffer retry with backoff, and
`/healthz`
says `degraded` until Redis answers again (runtimes/process/serving/service.py `Health`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import redis.asyncio as aioredis
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dualpath.logs import describe, event
from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import RealClock
from dualpath.runtimes.process.control import (
    Heartbeat,
    Member,
    MembershipWatch,
    Registry,
    lifeline,
    make_client,
    run_epoch,
)
from dualpath.runtimes.process.control.resilience import redact_url
from dualpath.runtimes.process.serving import fence
from dualpath.runtimes.process.serving.auth import HEALTH_PATHS, TokenCheck, token_middleware
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.peers import Peers, server_options
from dualpath.runtimes.process.serving.prom import ServiceCollector, registry_for
from dualpath.runtimes.process.serving.service import Health, ServiceShell

ShellFactory = Callable[
    [ServeOptions, Scenario, RealClock, aioredis.Redis], Awaitable[ServiceShell]
]


log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The service cannot start (Redis unreachable, peers missing): message says what to do."""


def expected_members(sc: Scenario) -> dict[str, int]:
    t = sc.topology
    return {"storage": 1, "scheduler": 1, "prefill": t.prefill_nodes, "decode": t.decode_nodes}


def expected_names(sc: Scenario) -> set[str]:
    t = sc.topology
    nodes = [f"prefill{i}" for i in range(t.prefill_nodes)]
    nodes += [f"decode{i}" for i in range(t.decode_nodes)]
    return {"storage", "scheduler", *nodes}


async def _connect(opts: ServeOptions) -> aioredis.Redis:
    # Short per-call deadlines: the heartbeat must beat several times per TTL.
    r = make_client(opts.redis_url, min(opts.rpc_timeout_s, opts.heartbeat_ttl_s))
    try:
        await asyncio.wait_for(r.ping(), opts.rpc_timeout_s)
    except (TimeoutError, OSError, aioredis.RedisError) as exc:
        await r.aclose()
        raise StartupError(
            f"--redis-url {redact_url(opts.redis_url)}: Redis does not answer ({exc}); start "
            "one or let `dualpath up` start it"
        ) from None
    return r


def _http_app(
    shell: ServiceShell, report: Health, reg: Any, token: str | None = None
) -> web.Application:
    app = shell.http_app()
    if app is None:
        app = _admin_app(report, reg)
        if token is not None:  # all of the admin app but the health answers
            app.middlewares.append(token_middleware(token, lambda p: p not in HEALTH_PATHS))
        return app
    if token is not None:
        # The scheduler's front door: /v1/... is the product's API and stays open (like an
        # OpenAI endpoint; put a gateway in front to authenticate users); /metrics is not.
        app.middlewares.append(token_middleware(token, lambda p: p == "/metrics"))
    app.middlewares.append(report.middleware())  # innermost: the app still counts it
    return app


def _admin_app(health: Health, reg: Any) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(reg), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/livez", health.livez)
    app.router.add_get("/metrics", metrics)
    return app


async def _start_http(app: web.Application, opts: ServeOptions) -> tuple[web.AppRunner, str]:
    host = opts.host
    port = opts.http_port if opts.role == "scheduler" else opts.admin_port
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=opts.grace_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(
            f"port {host}:{port} is not free ({exc.strerror}); pick another "
            f"({'--http-port' if opts.role == 'scheduler' else '--admin-port'})"
        ) from None
    addresses = runner.addresses  # the bound sockets' names: port 0 -> the real port
    bound = addresses[0][1] if addresses else port
    return runner, f"{host}:{bound}"


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def new_server(opts: ServeOptions) -> grpc.aio.Server:
    """The service's gRPC server: the channels' message caps, the token check, and the
    pending-call bounds of `peers.server_options` (a burst's calls are never dropped
    CANCELLED by gRPC itself)."""
    interceptors = [TokenCheck(opts.token)] if opts.token is not None else None
    return grpc.aio.server(
        interceptors=interceptors,
        options=server_options(opts.max_concurrent_rpcs, opts.transfer_timeout_s),
        maximum_concurrent_rpcs=opts.max_concurrent_rpcs,
    )


async def _start_grpc(
    opts: ServeOptions, shell: ServiceShell
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    # With a token, TokenCheck guards every method but health; without one (a loopback
    # bind, or --insecure) there is no interceptor at all.
    server = new_server(opts)
    hs = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    await hs.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    shell.add_to(server)
    port = server.add_insecure_port(f"{opts.host}:{opts.grpc_port}")
    if port == 0:
        # Stopped before the loop closes: else its __del__ prints a traceback at exit.
        await server.stop(None)
        raise StartupError(f"--grpc-port {opts.grpc_port}: cannot bind on {opts.host}")
    await server.start()
    return server, hs, port


async def _start_servers(
    opts: ServeOptions, shell: ServiceShell, report: Health, reg: Any
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int, web.AppRunner, str]:
    """gRPC, then HTTP. An HTTP port in use stops the gRPC server before the error goes up:
    left to its `__del__`, it prints a traceback once the loop has closed."""
    server, hs, port = await _start_grpc(opts, shell)
    try:
        runner, admin_addr = await _start_http(_http_app(shell, report, reg, opts.token), opts)
    except BaseException:
        await server.stop(None)
        raise
    return server, hs, port, runner, admin_addr


async def serve(opts: ServeOptions, sc: Scenario, make_shell: ShellFactory) -> None:
    """Run one service until SIGTERM/SIGINT or its launcher's death (returns) or a fatal
    error (raises it)."""
    parent = lifeline.expected_parent()
    if not lifeline.arm(parent):
        raise StartupError(f"the launcher (pid {parent}) exited before {opts.name} started")
    r = await _connect(opts)
    epoch = (
        opts.epoch
        if opts.epoch is not None
        else await run_epoch(r, opts.run_id, time.perf_counter())
    )
    clock = RealClock(opts.dilation, epoch=epoch)
    shell = await make_shell(opts, sc, clock, r)
    collector = ServiceCollector(
        shell.name, clock, shell.owned_links, shell.gauges(), shell.families()
    )
    reg = registry_for(collector)
    report = Health(shell, expected_names(sc) - {opts.name})
    server, hs, port, runner, admin_addr = await _start_servers(opts, shell, report, reg)
    ttl = opts.heartbeat_ttl_s
    registry = Registry(r, opts.run_id, ttl_s=ttl)
    beat = _heartbeat(opts, registry, f"{opts.host}:{port}", admin_addr)
    peers = Peers(opts.token)

    def on_members(members: list[Member]) -> None:
        peers.update(members)
        shell.on_members(members)

    # settle: one heartbeat interval (ttl/3) plus margin for every member to re-register
    watch = MembershipWatch(
        registry, on_members, ttl / 2, ttl / 3, ttl / 2, f"registry-watch:{opts.name}"
    )
    report.outages += [beat.outage, watch.outage]
    report.watch = watch
    stop = _stop_event()
    tasks: list[asyncio.Task[Any]] = []
    if parent is not None:
        tasks.append(asyncio.create_task(lifeline.watch_parent(parent, stop.set)))
    if opts.role in ("prefill", "decode"):  # engines fence; the storage keeps its blocks
        tasks.append(asyncio.create_task(fence.watch(ttl, shell.fail)))
    try:
        await _join(opts, sc, registry, peers, watch, shell, stop)
        await hs.set("", health_pb2.HealthCheckResponse.SERVING)
        event(log, "ready", peers=len(expected_names(sc)) - 1)
        watcher = asyncio.create_task(watch.run())
        tasks += [watcher, asyncio.create_task(stop.wait())]
        ends: list[asyncio.Future[Any]] = list(tasks[-2:])
        if shell.exit_on_fatal:
            ends.append(shell.fatal)
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done() and not watcher.cancelled():
            watcher.result()  # the watch survives Redis outages: ending is a bug, say it
        if shell.exit_on_fatal and shell.fatal.done():
            shell.fatal.result()
    finally:
        report.stopping = True
        event(log, "shutdown", reason=_why_stopping(shell, stop))
        for t in tasks:
            t.cancel()
        await _shutdown(
            [
                ("health", hs.enter_graceful_shutdown, 1.0),
                ("deregister", beat.stop, ttl),
                ("shell", shell.stop, opts.grace_s + ttl),
                ("grpc", lambda: server.stop(opts.grace_s), opts.grace_s + 2),
                ("http", runner.cleanup, opts.grace_s + 2),
                ("peers", peers.close, 2.0),
                ("redis", r.aclose, 2.0),
            ],
        )
        event(log, "stopped")


def _why_stopping(shell: ServiceShell, stop: asyncio.Event) -> str:
    if shell.fatal.done() and not shell.fatal.cancelled() and shell.fatal.exception():
        return f"fatal: {describe(shell.fatal.exception())}"  # type: ignore[arg-type]
    if stop.is_set():
        return "signal or launcher exit"
    return "error"  # an exception on its way out names itself (the entry point logs it)


def _heartbeat(opts: ServeOptions, registry: Registry, grpc_addr: str, http_addr: str) -> Heartbeat:
    """Start heartbeating (the first beat registers this service) and say where it serves."""
    meta = {"pid": str(os.getpid())}  # tells a restarted process from its predecessor
    beat = Heartbeat(registry, Member(opts.role, opts.name, grpc_addr, http_addr, meta))
    beat.start()
    event(
        log,
        "service_start",
        role=opts.role,
        grpc=grpc_addr,
        http=http_addr,
        run_id=opts.run_id,
        pid=os.getpid(),
        dilation=opts.dilation,
    )
    return beat


async def _shutdown(steps: list[tuple[str, Callable[[], Awaitable[Any]], float]]) -> None:
    """Run every shutdown step, each within its deadline: one failing or hanging step (e.g.
    a flush to an unreachable Redis) must not keep the others from releasing ports."""
    for step, run, deadline_s in steps:
        try:
            async with asyncio.timeout(deadline_s):
                await run()
        except Exception as exc:  # logged; the remaining steps still run
            event(log, "shutdown_step_failed", logging.WARNING, exc=exc, step=step)


async def _join(
    opts: ServeOptions,
    sc: Scenario,
    registry: Registry,
    peers: Peers,
    watch: MembershipWatch,
    shell: ServiceShell,
    stop: asyncio.Event,
) -> None:
    """Wait until every service of the run is registered, then hand the shell its peers."""
    find = asyncio.create_task(registry.wait_for(expected_members(sc), opts.discovery_timeout_s))
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([find, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not find.done():
        find.cancel()
        raise asyncio.CancelledError
    try:
        members = find.result()
    except TimeoutError as exc:
        raise StartupError(
            f"discovery: {exc}; are all services of run {opts.run_id!r} up?"
        ) from None
    event(log, "registered", members=len(members))
    peers.update(members)
    watch.seed(members)
    await shell.on_peers(peers)
    shell.ready = True
