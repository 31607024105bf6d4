"""The SSE framing (aiohttp-sse) on the wire: `data: ...\\n\\n` events ending in
`data: [DONE]`, keep-alive `: ping` comments while a turn is held (the OpenAI client skips
them), the client's `Connection` choice honoured, and no ping task left behind."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
import pytest_asyncio

from dualpath.runtimes.process.frontdoor import sse
from tests.polling import wait_until_async
from tests.runtimes.process.frontdoor.conftest import MODEL, Server

HI = [{"role": "user", "content": "hi"}]
GEN = 6


def _request(version: str = "1.0", connection: str | None = None) -> bytes:
    body = json.dumps({"model": MODEL, "messages": HI, "max_tokens": GEN, "stream": True})
    head = [
        f"POST /v1/chat/completions HTTP/{version}",
        "Host: test",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    head += [f"Connection: {connection}"] if connection else []
    return ("\r\n".join(head) + "\r\n\r\n" + body).encode()


def _port(server: Server) -> int:
    return int(server.base.rsplit(":", 1)[1])


def _pings_running() -> int:
    """aiohttp-sse's ping tasks still alive in this loop."""
    names = [getattr(t.get_coro(), "__qualname__", "") for t in asyncio.all_tasks()]
    return names.count("EventSourceResponse._ping")


@pytest_asyncio.fixture
async def pinging(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    monkeypatch.setattr(sse, "PING_INTERVAL_S", 0.01)
    server.backend.gate = asyncio.Event()  # turns hold after their first token
    return server


@pytest.mark.asyncio
async def test_a_held_stream_pings_and_the_openai_client_skips_the_pings(
    pinging: Server, client: openai.AsyncOpenAI
) -> None:
    held = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=GEN, stream=True
    )
    chunks = [await anext(aiter(held))]  # its headers are out: it pings from now on
    # a second stream, read raw, started later: once it has pinged, so has the first
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(pinging))
    writer.write(_request())  # HTTP/1.0: the body is the event stream as is, until EOF
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    before = await asyncio.wait_for(reader.readuntil(b": ping\n\n"), 10)
    assert pinging.backend.gate is not None
    pinging.backend.gate.set()
    rest = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    chunks += [c async for c in held]

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == GEN  # one word per token
    headers = head.decode().lower()
    assert "content-type: text/event-stream\r\n" in headers
    assert "cache-control: no-cache" in headers and "x-accel-buffering: no" in headers
    events = (before + rest).split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    assert {e for e in events[:-1] if not e.startswith(b"data: ")} == {b": ping"}
    data = [json.loads(e[6:]) for e in events[:-2] if e.startswith(b"data: ")]
    assert sum(len(d["choices"][0]["delta"].get("content", "").split()) for d in data) == GEN


@pytest.mark.asyncio
async def test_a_client_hanging_up_mid_stream_ends_its_ping_task(server: Server) -> None:
    # with the default interval the task would only notice at its next ping, 15 s later
    server.backend.gate = asyncio.Event()
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(server))
    writer.write(_request())
    await asyncio.wait_for(reader.readuntil(b"data: "), 10)
    assert _pings_running() == 1
    writer.close()
    await wait_until_async(lambda: _pings_running() == 0, 5, 0.01, what="the ping task to end")
    server.backend.gate.set()


@pytest.mark.asyncio
@pytest.mark.parametrize(("connection", "expected"), [("close", "close"), (None, None)])
async def test_the_connection_header_is_the_servers_own(
    server: Server, connection: str | None, expected: str | None
) -> None:
    """aiohttp-sse would say keep-alive even to a client that asked to close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(server))
    writer.write(_request("1.1", connection))
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode().lower()
    await asyncio.wait_for(reader.readuntil(b"data: [DONE]\n\n"), 10)
    writer.close()
    await wait_until_async(lambda: _pings_running() == 0, 5, 0.01, what="the ping task to end")
    found = [
        ln.split(":", 1)[1].strip() for ln in head.split("\r\n") if ln.startswith("connection:")
    ]
    assert found == ([expected] if expected else [])
