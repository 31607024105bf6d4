"""What every service shell offers its host process (see host.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from aiohttp import web

from dualpath.control import Member
from dualpath.links import Link
from dualpath.serving.peers import Peers
from dualpath.serving.prom import Gauges


class ServiceShell:
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

    def add_to(self, server: grpc.aio.Server) -> None:
        raise NotImplementedError

    async def on_peers(self, peers: Peers) -> None:
        """Every service of the run is registered: start working."""

    def on_members(self, members: list[Member]) -> None:
        """The live registry, refreshed every heartbeat period."""

    async def stop(self) -> None:
        """Stop accepting work and cancel background tasks (SIGTERM)."""

    def stats(self) -> dict[str, Any]:
        raise NotImplementedError

    def gauges(self) -> Gauges:
        return dict

    def health(self) -> dict[str, Any]:
        return {}

    def http_app(self) -> web.Application | None:
        """The scheduler's front door; other services get a small admin app."""
        return None
