"""Fuzz the whole front door over raw HTTP: no 5xx, no hang, still healthy afterwards.

Hypothesis draws batches of requests (all endpoints, random JSON shapes and types, huge and
negative numbers, unicode with lone surrogates and NULs, random methods and headers incl.
Content-Encoding, Content-Type and Expect); each batch is sent concurrently to one app
with the FakeBackend. DUALPATH_FUZZ_REQUESTS (default 10,000) sets the total.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dualpath.runtimes.process.frontdoor import RUNNER_KEY
from tests.runtimes.process.frontdoor.test_hostile_input import Reply, Served, read_reply, serve

REQUESTS = int(os.environ.get("DUALPATH_FUZZ_REQUESTS", "10000"))
BATCH = 25
TIMEOUT_S = 10.0  # per request: a reply that takes longer is a hang

POSTS = ["/v1/completions", "/v1/chat/completions", "/v1/agent/turn"]
GETS = ["/v1/models", "/healthz", "/metrics"]
OTHER_PATHS = [
    "/",
    "/v1",
    "/v1/completions/",
    "/v1/nope",
    "/%ff%fe",
    "/healthz?x=%00",
    "/v1//models",
]
# llhttp accepts these; any other token is refused by aiohttp's parser before the app runs.
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND"]
BAD_METHODS = ["FOO", "get", "P0ST"]

ABSENT = object()
NUMBERS = [0, 1, -1, 4, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**30, 1.5, 1e308]
# Any code point (lone surrogates included), and these often.
text = st.text(st.characters() | st.sampled_from("\ud800\udfff\x00\u00e9\U0001f600"), max_size=24)
scalar = (
    st.none()
    | st.booleans()
    | st.sampled_from(NUMBERS)
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and +-Infinity too: Python's json reads them
    | text
)
value = st.recursive(
    scalar,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(text, kids, max_size=4),
    max_leaves=10,
)


def field(*good: Any) -> st.SearchStrategy[Any]:
    """A sensible value 80 % of the time, else garbage or absent (10 % each): mostly
    well-formed requests get deep enough to reach the code past validation."""
    return st.integers(0, 9).flatmap(
        lambda k: st.sampled_from(good) if k < 8 else value if k < 9 else st.just(ABSENT)
    )


def present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not ABSENT}


message = st.fixed_dictionaries(
    {
        "role": field("user", "system", "assistant", "tool"),
        "content": field("hi", "", None, [{"type": "text", "text": "a"}], "\ud800"),
    }
).map(present)
Shape = dict[str, st.SearchStrategy[Any]]
AGENT_COMMON: Shape = {
    "session": field("a", "b", "c", "d", "e", "", "s" * 200, "\ud800"),
    "gen_tokens": field(2, 2, 2, 0, 300),
    "turn": field(0, 1, -1),
}
SHAPES: dict[str, list[Shape]] = {
    "/v1/completions": [
        {
            "model": field("fake-model"),
            "prompt": field("hello world", [1, 2, 3], ["x y"], "\udfff", [2**32], [0] * 50),
            "max_tokens": field(1, 4, 256, 0, -5),
            "stream": field(False, True),
            "stream_options": field({"include_usage": True}),
            "n": field(1, 2),
            "user": field("u1", "x" * 300),
        }
    ],
    "/v1/chat/completions": [
        {
            "model": field("fake-model"),
            "messages": st.one_of(st.lists(message, max_size=3), value),
            "max_completion_tokens": field(2, 0, 10**9),
            "max_tokens": field(3),
            "stream": field(False, True),
            "stream_options": field({"include_usage": False}),
        }
    ],
    "/v1/agent/turn": [
        {**AGENT_COMMON, "append_tokens": field(8, 0, 10**12)},
        {  # the block-id form, as a trace replays it
            **AGENT_COMMON,
            "prompt_tokens": field(8, 64, 4096, 4097, 0),
            "block_ids": field([1], [1, 2], [2**63 - 1], [-(2**63)], list(range(20)), [True]),
            "block_tokens": field(4, 8, 64, 4 * 10**17, 4 * 10**17, 3, 0),
        },
    ],
}


@dataclass
class Req:
    method: str
    path: str
    headers: list[str]
    body: bytes
    clean: bool  # only valid HTTP: every 4xx must then be the app's JSON error


def to_json(obj: Any, ascii_only: bool) -> bytes:
    # Not ASCII-only: lone surrogates go out as their (invalid) UTF-8 bytes.
    return json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def requests(draw: st.DrawFn) -> Req:
    path = draw(st.sampled_from(POSTS * 4 + GETS + OTHER_PATHS))
    method = "POST" if path in POSTS else "GET"
    clean = True
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(METHODS + BAD_METHODS))
        clean = method in METHODS
    kind = draw(
        st.sampled_from(["shaped"] * 12 + ["value", "bytes", "truncated", "nested", "empty"])
    )
    if kind == "shaped" and path in SHAPES:
        shape = draw(st.sampled_from(SHAPES[path]))
        obj: Any = present({k: draw(v) for k, v in shape.items()})
        body = to_json(obj, draw(st.booleans()))
    elif kind == "bytes":
        body = draw(st.binary(max_size=40))
    elif kind == "nested":
        depth = draw(st.integers(1, 5000))
        body = b"[" * depth + b"]" * draw(st.integers(0, depth))
    elif kind == "empty":
        body = b""
    else:
        body = to_json(draw(value), draw(st.booleans()))
        if kind == "truncated":
            body = body[: draw(st.integers(0, len(body)))]
    headers: list[str] = []
    coding = draw(
        st.sampled_from(
            [None] * 14 + ["gzip", "deflate", "br", "zstd", "identity", "gzip, deflate", "x"]
        )
    )
    if coding is not None:
        headers.append(f"Content-Encoding: {coding}")
        if draw(st.booleans()):  # else the header lies
            body = gzip.compress(body) if coding.startswith("gzip") else zlib.compress(body)
    for name, options in [
        (
            "Content-Type",
            [
                "application/json",
                "text/plain",
                "multipart/form-data; boundary=x",
                "x/y; charset=latin-1",
            ],
        ),
        ("Expect", ["100-continue", "something-odd"]),
        ("Accept", ["text/html", "*/*"]),
        ("X-Session-Id", ["a1", " ", "é" * 3, "s" * 300]),
    ]:
        if draw(st.integers(0, 9)) == 0:
            headers.append(f"{name}: {draw(st.sampled_from(options))}")
    if draw(st.integers(0, 19)) == 0:
        headers.append("Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    return Req(method, path, headers, body, clean)


def wire(req: Req) -> bytes:
    lines = [f"{req.method} {req.path} HTTP/1.1", "Host: fuzz", "Connection: close", *req.headers]
    if not any(h.startswith("Transfer-Encoding") for h in req.headers):
        lines.append(f"Content-Length: {len(req.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + req.body


async def exchange(port: int, req: Req) -> Reply:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(wire(req))
        try:
            return await asyncio.wait_for(read_reply(reader, req.method == "HEAD"), TIMEOUT_S)
        except TimeoutError:
            pytest.fail(f"no reply within {TIMEOUT_S} s (a hang) to {req}")
    finally:
        writer.close()


def check(req: Req, reply: Reply) -> None:
    assert reply.status < 500, (req, reply)
    ctype = reply.headers.get("content-type", "")
    if reply.status >= 400 and req.clean:
        assert ctype.startswith("application/json"), (req, reply)
        if req.method != "HEAD":
            reply.error()
    if reply.status == 200 and req.method == "POST" and ctype == "text/event-stream":
        assert reply.body.endswith(b"data: [DONE]\n\n"), (req, reply)


class ServerThread:
    """The app on its own loop in a thread: a server stuck in CPU work cannot stop the
    client's timeouts from firing (sharing one loop, it would)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._cm = serve(max_inflight=1_000)

    def __enter__(self) -> Served:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._cm.__aenter__(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        stop = asyncio.run_coroutine_threadsafe(self._cm.__aexit__(None, None, None), self.loop)
        stop.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.mark.slow
def test_fuzz_never_5xx_never_hangs() -> None:
    statuses: Counter[int] = Counter()
    loop = asyncio.new_event_loop()

    async def batch(port: int, reqs: list[Req]) -> None:
        replies = await asyncio.gather(*(exchange(port, r) for r in reqs))
        for req, reply in zip(reqs, replies, strict=True):
            statuses[reply.status] += 1
            check(req, reply)

    with ServerThread() as served:

        @settings(
            max_examples=-(-REQUESTS // BATCH),
            deadline=None,
            database=None,
            # No shrinking: examples share one server (sessions, chains), so a shrunk batch
            # may not fail again; the assertion already names the failing request.
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(st.lists(requests(), min_size=BATCH, max_size=BATCH))
        def fuzz(reqs: list[Req]) -> None:
            loop.run_until_complete(batch(served.port, reqs))

        started = time.perf_counter()
        try:
            fuzz()
            took = time.perf_counter() - started
            sent = sum(statuses.values())
            print(f"fuzz: {sent} requests in {took:.1f} s; statuses {sorted(statuses.items())}")
            assert sent >= REQUESTS
            health = Req("GET", "/healthz", [], b"", clean=True)
            assert loop.run_until_complete(exchange(served.port, health)).status == 200
            runner = served.app[RUNNER_KEY]
            deadline = time.monotonic() + 5
            while runner.inflight and time.monotonic() < deadline:
                time.sleep(0.01)
            assert runner.inflight == 0
        finally:
            loop.close()
