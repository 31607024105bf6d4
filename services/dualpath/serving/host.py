"""One service process: the composition root of `dualpath serve ROLE` (DESIGN §7).

Lifecycle (reference/conventions.md B1): build the core objects, start the gRPC server with
the health service (NOT_SERVING until every peer is known), the admin/HTTP app, register in
Redis with a TTL heartbeat, wait for the whole run to register, serve; on SIGTERM/SIGINT flip
health to NOT_SERVING, deregister, stop the shell, give in-flight RPCs `grace_s`, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import redis.asyncio as aioredis
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dualpath.config.settings import Scenario
from dualpath.control import Heartbeat, Member, Registry, run_epoch
from dualpath.core.clock import RealClock
from dualpath.serving.options import ServeOptions
from dualpath.serving.peers import CHANNEL_OPTIONS, Peers
from dualpath.serving.prom import ServiceCollector, registry_for
from dualpath.serving.service import ServiceShell

ShellFactory = Callable[
    [ServeOptions, Scenario, RealClock, aioredis.Redis], Awaitable[ServiceShell]
]


class StartupError(RuntimeError):
    """The service cannot start (Redis unreachable, peers missing): message says what to do."""


def expected_members(sc: Scenario) -> dict[str, int]:
    t = sc.topology
    return {"storage": 1, "scheduler": 1, "prefill": t.prefill_nodes, "decode": t.decode_nodes}


async def _connect(opts: ServeOptions) -> aioredis.Redis:
    r = aioredis.Redis.from_url(opts.redis_url, socket_timeout=opts.rpc_timeout_s)
    try:
        await asyncio.wait_for(r.ping(), opts.rpc_timeout_s)
    except (TimeoutError, OSError, aioredis.RedisError) as exc:
        await r.aclose()
        raise StartupError(
            f"--redis-url {opts.redis_url}: Redis does not answer ({exc}); start one or let "
            "`dualpath up` start it"
        ) from None
    return r


def _admin_app(shell: ServiceShell, reg: Any) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        body = {
            "status": "ok" if not shell.fatal.done() else "failed",
            "ready": shell.ready,
            **shell.health(),
        }
        return web.json_response(body, status=200 if body["status"] == "ok" else 503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(reg), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


async def _start_http(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(
            f"port {host}:{port} is not free ({exc.strerror}); pick another"
        ) from None
    server: Any = site._server  # aiohttp keeps the bound socket here (port 0 -> real port)
    bound = server.sockets[0].getsockname()[1] if server is not None else port
    return runner, f"{host}:{bound}"


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(opts: ServeOptions, sc: Scenario, make_shell: ShellFactory) -> None:
    """Run one service until SIGTERM/SIGINT (returns) or a fatal error (raises it)."""
    r = await _connect(opts)
    epoch = (
        opts.epoch
        if opts.epoch is not None
        else await run_epoch(r, opts.run_id, time.perf_counter())
    )
    clock = RealClock(opts.dilation, epoch=epoch)
    shell = await make_shell(opts, sc, clock, r)
    reg = registry_for(ServiceCollector(shell.name, clock, shell.owned_links, shell.gauges()))
    server = grpc.aio.server(
        options=CHANNEL_OPTIONS, maximum_concurrent_rpcs=opts.max_concurrent_rpcs
    )
    hs = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    await hs.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    shell.add_to(server)
    port = server.add_insecure_port(f"{opts.host}:{opts.grpc_port}")
    if port == 0:
        raise StartupError(f"--grpc-port {opts.grpc_port}: cannot bind on {opts.host}")
    await server.start()
    app = shell.http_app() or _admin_app(shell, reg)
    http_port = opts.http_port if opts.role == "scheduler" else opts.admin_port
    runner, admin_addr = await _start_http(app, opts.host, http_port)
    registry = Registry(r, opts.run_id, ttl_s=opts.heartbeat_ttl_s)
    member = Member(opts.role, opts.name, f"{opts.host}:{port}", admin_addr, {})
    beat = Heartbeat(registry, member)
    beat.start()
    peers = Peers()
    stop = _stop_event()
    try:
        await _join(opts, sc, registry, peers, shell, stop)
        await hs.set("", health_pb2.HealthCheckResponse.SERVING)
        watch = asyncio.create_task(_watch(registry, peers, shell, opts.heartbeat_ttl_s))
        waiter = asyncio.create_task(stop.wait())
        ends: list[asyncio.Future[Any]] = [waiter, watch]
        if shell.exit_on_fatal:
            ends.append(shell.fatal)
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        for t in (watch, waiter):
            t.cancel()
        if watch.done() and not watch.cancelled() and watch.exception() is not None:
            raise watch.exception()  # type: ignore[misc]
        if shell.exit_on_fatal and shell.fatal.done():
            shell.fatal.result()
    finally:
        await hs.enter_graceful_shutdown()
        await beat.stop()
        await shell.stop()
        await server.stop(opts.grace_s)
        await runner.cleanup()
        await peers.close()
        await r.aclose()


async def _join(
    opts: ServeOptions,
    sc: Scenario,
    registry: Registry,
    peers: Peers,
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
    peers.update(members)
    await shell.on_peers(peers)
    shell.ready = True


async def _watch(registry: Registry, peers: Peers, shell: ServiceShell, ttl_s: float) -> None:
    while True:
        await asyncio.sleep(ttl_s / 2)
        members = await registry.members()
        peers.update(members)
        shell.on_members(members)
