"""What every service shell offers its host process (see host.py)."""

from __future__ import annotations

import abc
import asyncio
from typing import Any

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dualpath.model.links import Link
from dualpath.runtimes.process.control import Member, MembershipWatch, Outage
from dualpath.runtimes.process.serving.peers import Peers
from dualpath.runtimes.process.serving.prom import Families, Gauges


class ServiceShell(abc.ABC):
    """Base of the storage, node and scheduler shells. The host owns the process lifecycle
    (gRPC server, health, admin HTTP, registry, signals); a shell owns its core objects."""

    name: str
    owned_links: list[Link]

    def __init__(self) -> None:
        self.fatal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ready = False  # every peer is known and the shell is working
        self.exit_on_fatal = True  # the scheduler keeps serving to report the failure
        self.payload_bytes_verified = 0  # real-payload mode: bytes whose checksum passed here

    def fail(self, exc: BaseException) -> None:
        """An error that must end the run loudly (lost or corrupted KV, a lost transfer)."""
        if not self.fatal.done():
            self.fatal.set_exception(exc)

    @abc.abstractmethod
    def add_to(self, server: grpc.aio.Server) -> None:
        """Register this shell's gRPC servicer on `server`."""

    async def on_peers(self, peers: Peers) -> None:  # noqa: B027 -- optional hook: no-op
        """Every service of the run is registered: start working."""

    def on_members(self, members: list[Member]) -> None:  # noqa: B027 -- optional hook
        """The live registry, refreshed every heartbeat period."""

    async def stop(self) -> None:  # noqa: B027 -- optional hook: nothing to stop
        """Stop accepting work and cancel background tasks (SIGTERM)."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """What `dualpath run` gathers for the report (msgpack-able)."""

    def gauges(self) -> Gauges:
        return dict

    def families(self) -> Families:
        """Whole metric families for /metrics (a node's engines as vLLM engine cores)."""
        return tuple

    def health(self) -> dict[str, Any]:
        return {}

    def http_app(self) -> web.Application | None:
        """The scheduler's front door; other services get a small admin app."""
        return None


class Health:
    """What `/healthz` answers for one service: 200 only while it serves normally, else 503
    with the reasons (JSON `status`, `reasons`, plus the shell's own details).

    `status` is the worst of: `failed` (a fatal error), `stopping`, `starting` (peers not
    all known yet), `degraded` (Redis unreachable, peers lost), `ok`. Degraded services
    still serve: from the membership last read and with events buffered. `/livez` is the
    liveness answer (503 only when failed), for probes that restart what they find dead.
    """

    def __init__(self, shell: ServiceShell, expected_peers: set[str]) -> None:
        self.shell = shell
        self.expected_peers = expected_peers
        self.stopping = False
        self.outages: list[Outage] = []  # control-plane links whose state counts
        self.watch: MembershipWatch | None = None

    def lost(self) -> list[str]:
        """Expected peers missing from the last fresh registry read."""
        if self.watch is None or self.watch.fresh_at is None:
            return []
        live = {m.name for m in self.watch.members}
        return sorted(self.expected_peers - live)

    def _failure(self) -> str | None:
        fatal = self.shell.fatal
        if not fatal.done():
            return None
        exc = None if fatal.cancelled() else fatal.exception()
        return f"failed: {exc!r}" if exc is not None else "failed"

    def report(self) -> tuple[int, dict[str, Any]]:
        reasons: list[str] = []
        try:
            details = dict(self.shell.health())
        except Exception as exc:  # a broken probe is itself a health finding
            details = {}
            reasons.append(f"health probe failed: {exc!r}")
        failure = self._failure()
        if failure is not None:
            reasons.append(failure)
        if self.stopping:
            reasons.append("stopping: shutting down")
        elif not self.shell.ready:
            reasons.append("starting: waiting for every peer of the run to register")
        down = [o for o in self.outages if o.down]
        for o in down:
            reasons.append(
                f"redis unreachable for {o.down_for():.1f} s ({o.component}: {o.last_error})"
            )
        lost = sorted(set(self.lost()) | set(details.get("lost") or []))
        if lost:
            reasons.append("lost peers: " + ", ".join(lost))
        status = _status(failure is not None, self.stopping, self.shell.ready, bool(reasons))
        body = {
            **details,
            "status": status,
            "reasons": reasons,
            "ready": self.shell.ready,
            "lost": lost,
            "redis_reachable": not down,
        }
        return (200 if status == "ok" else 503), body

    async def healthz(self, _: web.Request) -> web.Response:
        code, body = self.report()
        return web.json_response(body, status=code)

    async def livez(self, _: web.Request) -> web.Response:
        failure = self._failure()
        body = {"status": "failed" if failure else "alive", "reasons": [failure] if failure else []}
        return web.json_response(body, status=503 if failure else 200)

    def middleware(self) -> Middleware:
        """Answers `/healthz` and `/livez` on an app whose routes belong to someone else
        (the scheduler's front door): the host owns the process's health."""

        @web.middleware
        async def health(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.method in ("GET", "HEAD"):
                if request.path == "/healthz":
                    return await self.healthz(request)
                if request.path == "/livez":
                    return await self.livez(request)
            return await handler(request)

        return health


def _status(failed: bool, stopping: bool, ready: bool, any_reason: bool) -> str:
    if failed:
        return "failed"
    if stopping:
        return "stopping"
    if not ready:
        return "starting"
    return "degraded" if any_reason else "ok"
