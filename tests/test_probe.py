"""`python -m dualpath.probe`: the healthcheck command of the compose services.

Checked against a real grpc.aio server with the standard health servicer and a real aiohttp
app, both on 127.0.0.1 with an OS-chosen port. The probe is synchronous (it is a one-shot
command), so it runs in a thread or a subprocess while the event loop serves.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dualpath import probe

Status = health_pb2.HealthCheckResponse


@pytest_asyncio.fixture
async def health_server() -> AsyncIterator[tuple[str, health.aio.HealthServicer]]:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        await server.stop(None)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port that refuses connections for the whole test: bound but never listening, so
    no other process can take it in between (unlike a closed "free" port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


async def _http_app(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/healthz", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server  # aiohttp keeps the bound socket here
    return runner, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/healthz"


async def _probe_in_thread(*argv: str) -> int:
    return await asyncio.to_thread(probe.main, list(argv))


async def _probe_subprocess(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dualpath.probe",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


# --------------------------------------------------------------------------- gRPC


@pytest.mark.asyncio
async def test_grpc_serving_exits_0(
    health_server: tuple[str, health.aio.HealthServicer],
) -> None:
    target, servicer = health_server
    await servicer.set("", Status.SERVING)
    code, err = await _probe_subprocess("--grpc", target)
    assert (code, err) == (0, "")


@pytest.mark.asyncio
async def test_grpc_not_serving_exits_1_with_one_line(
    health_server: tuple[str, health.aio.HealthServicer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    target, servicer = health_server
    await servicer.set("", Status.NOT_SERVING)
    assert await _probe_in_thread("--grpc", target) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NOT_SERVING" in err and target in err


@pytest.mark.asyncio
async def test_grpc_draining_service_is_unhealthy(
    health_server: tuple[str, health.aio.HealthServicer],
) -> None:
    # what `dualpath serve` does on SIGTERM: the check must fail while it drains
    target, servicer = health_server
    await servicer.set("", Status.SERVING)
    await servicer.enter_graceful_shutdown()
    assert await _probe_in_thread("--grpc", target) == 1


@pytest.mark.asyncio
async def test_grpc_nothing_listening_exits_1_quickly_without_traceback(
    refused_port: int,
) -> None:
    t0 = time.monotonic()
    code, err = await _probe_subprocess("--grpc", f"127.0.0.1:{refused_port}")
    elapsed = time.monotonic() - t0
    assert code == 1
    assert err.startswith("unhealthy: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "UNAVAILABLE" in err
    # deadline 2 s + interpreter start; a refused connection must not wait for retries
    assert elapsed < 10, elapsed


# --------------------------------------------------------------------------- HTTP


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "ok", "ready": True}, 0),
        (200, {"status": "ok", "ready": False}, 1),
        (200, {"status": "ok"}, 1),
        (503, {"status": "failed", "ready": True}, 1),
        (200, "not json", 1),
        (200, [1, 2], 1),
    ],
)
@pytest.mark.asyncio
async def test_http(status: int, body: object, expected: int) -> None:
    async def handler(_: web.Request) -> web.Response:
        if isinstance(body, str):
            return web.Response(text=body, status=status)
        return web.json_response(body, status=status)

    runner, url = await _http_app(handler)
    try:
        assert await _probe_in_thread("--http", url) == expected
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_http_nothing_listening_exits_1_without_traceback(refused_port: int) -> None:
    code, err = await _probe_subprocess("--http", f"http://127.0.0.1:{refused_port}/healthz")
    assert code == 1
    assert err.startswith("unhealthy: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_exactly_one_check_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["--grpc", "a:1", "--http", "http://a/"]):
        with pytest.raises(SystemExit) as exc:
            probe.main(argv)
        assert exc.value.code == 2
    capsys.readouterr()
