"""Security defaults of `dualpath serve`: the shared token on gRPC and admin HTTP, the refusal
to bind a routable address without one, and the gRPC message caps.

Every server here binds 127.0.0.1 on a free port, runs inside the test's event loop and is
stopped in a `finally`; the CLI test runs a subprocess with a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from dualpath.runtimes.process.serving.auth import TokenCheck
from dualpath.runtimes.process.serving.host import _http_app
from dualpath.runtimes.process.serving.options import TOKEN_ENV
from dualpath.runtimes.process.serving.peers import CHANNEL_OPTIONS, MAX_MESSAGE_BYTES, make_channel
from dualpath.runtimes.process.serving.service import Health, ServiceShell

TOKEN = "0123456789abcdef-test-token"
SERVICE = "dualpath.test.Echo"
CALL_S = 5.0  # deadline of every test call: a hang fails the test instead of stalling it


def _identity(b: bytes) -> bytes:
    return b


async def _unary(request: bytes, _: Any) -> bytes:
    return b"ok:" + request[:8]


async def _stream(request: bytes, _: Any) -> AsyncIterator[bytes]:
    for i in range(3):
        yield b"%d" % i


def _echo_handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary, _identity, _identity),
            "Stream": grpc.unary_stream_rpc_method_handler(_stream, _identity, _identity),
        },
    )


async def _server(token: str | None) -> tuple[grpc.aio.Server, str]:
    """The host's server setup (host.py `_start_grpc`): same options and interceptor."""
    server = grpc.aio.server(
        interceptors=[TokenCheck(token)] if token else None, options=CHANNEL_OPTIONS
    )
    hs = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    await hs.set("", health_pb2.HealthCheckResponse.SERVING)
    server.add_generic_rpc_handlers((_echo_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    assert port > 0
    await server.start()
    return server, f"127.0.0.1:{port}"


def _unary_call(ch: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return ch.unary_unary(f"/{SERVICE}/Unary", _identity, _identity)


async def _code(call: Callable[[], Any]) -> grpc.StatusCode:
    try:
        await call()
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def _health(ch: grpc.aio.Channel) -> int:
    check = ch.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    reply = await check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_S)
    return int(reply.status)


@pytest.mark.asyncio
async def test_grpc_token_is_required_except_for_health() -> None:
    server, addr = await _server(TOKEN)
    channels = {
        "none": make_channel(addr),
        "wrong": make_channel(addr, "x" * len(TOKEN)),
        "right": make_channel(addr, TOKEN),
    }
    try:
        for name, ch in channels.items():
            unary = _unary_call(ch)
            stream = ch.unary_stream(f"/{SERVICE}/Stream", _identity, _identity)

            async def read_stream(s: Any = stream) -> list[bytes]:
                return [m async for m in s(b"", timeout=CALL_S)]

            want = grpc.StatusCode.OK if name == "right" else grpc.StatusCode.UNAUTHENTICATED

            async def call_unary(u: Any = unary) -> bytes:
                return bytes(await u(b"hello", timeout=CALL_S))

            assert await _code(call_unary) == want, name
            assert await _code(read_stream) == want, name
            # Probes send no metadata: the standard health service answers everyone.
            assert await _health(ch) == health_pb2.HealthCheckResponse.SERVING, name
        right = channels["right"]
        assert await _unary_call(right)(b"hello", timeout=CALL_S) == b"ok:hello"
        assert await read_stream_all(right) == [b"0", b"1", b"2"]
    finally:
        for ch in channels.values():
            await ch.close(grace=None)
        await server.stop(None)


async def read_stream_all(ch: grpc.aio.Channel) -> list[bytes]:
    stream = ch.unary_stream(f"/{SERVICE}/Stream", _identity, _identity)
    return [m async for m in stream(b"", timeout=CALL_S)]


@pytest.mark.asyncio
async def test_message_over_the_cap_fails_the_call_not_the_server() -> None:
    server, addr = await _server(None)
    # A client with no send cap of its own: the server's receive cap must refuse it.
    loose = grpc.aio.insecure_channel(addr, options=[("grpc.max_send_message_length", -1)])
    capped = make_channel(addr)
    try:
        big = b"\0" * (MAX_MESSAGE_BYTES + 1)
        code = await _code(lambda: _unary_call(loose)(big, timeout=CALL_S * 4))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The channels' own send cap refuses it before it leaves the process.
        code = await _code(lambda: _unary_call(capped)(big, timeout=CALL_S * 4))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # A message at the largest real size passes, and the server still serves.
        assert await _unary_call(capped)(b"x" * (64 << 20), timeout=CALL_S * 4) == b"ok:xxxxxxxx"
    finally:
        await loose.close(grace=None)
        await capped.close(grace=None)
        await server.stop(None)


class _AdminShell(ServiceShell):
    def __init__(self) -> None:
        super().__init__()
        self.name = "storage"
        self.owned_links = []

    def add_to(self, server: Any) -> None:
        pass  # the admin app is under test, not a gRPC servicer

    def stats(self) -> dict[str, Any]:
        return {}


@pytest.mark.asyncio
async def test_admin_metrics_need_the_token_health_does_not() -> None:
    shell = _AdminShell()
    shell.ready = True
    app = _http_app(shell, Health(shell, set()), CollectorRegistry(), TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}):
            resp = await client.get("/metrics", headers=headers)
            assert resp.status == 401
            body = await resp.json()
            assert body["error"]["type"] == "unauthorized"
        resp = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status == 200
        for path in ("/healthz", "/livez"):
            assert (await client.get(path)).status == 200, path


def test_serve_refuses_a_routable_bind_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env |= {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    # Port 1 on loopback: nothing answers. The refusal must come before any Redis call or
    # bind, so the message is about the token and the command ends at once.
    proc = subprocess.run(
        [sys.executable, "-m", "dualpath", "serve", "storage", "--host", "0.0.0.0",
         "--redis-url", "redis://127.0.0.1:1/0", "--grpc-port", "0"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--host 0.0.0.0" in lines[0] and "--insecure" in lines[0], lines[0]
    assert "Redis" not in lines[0]


@pytest.mark.asyncio
async def test_bearer_interceptor_keeps_a_caller_s_metadata() -> None:
    seen: list[tuple[str, str]] = []

    class Record(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            seen.extend((k, v) for k, v in details.invocation_metadata or ())
            return await continuation(details)

    server = grpc.aio.server(interceptors=[Record(), TokenCheck(TOKEN)])
    server.add_generic_rpc_handlers((_echo_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ch = make_channel(f"127.0.0.1:{port}", TOKEN)
    try:
        await _unary_call(ch)(b"", timeout=CALL_S, metadata=(("x-request-id", "r1"),))
    finally:
        await ch.close(grace=None)
        await server.stop(None)
    assert ("x-request-id", "r1") in seen and ("authorization", f"Bearer {TOKEN}") in seen
