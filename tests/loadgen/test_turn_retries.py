"""A Locust session's turn: a refusal (429/503) is sent again after its Retry-After, up to
RETRIES times; any other failure ends the session at once. Every refused try is a failed
request in Locust's stats.

Locust runs in its own process (it monkey-patches on import) against a real HTTP server
here that refuses on cue."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections import Counter
from typing import Any

import pytest
from aiohttp import web

RETRY_AFTER_S = 0.05
ANSWER = {"generated_tokens": 2, "prompt_tokens": 8, "cached_tokens": 0}  # a native answer

# One user, four turns, each against a path that answers differently (see `_app`).
_TURNS = textwrap.dedent(
    """
    import json, sys, time
    from locust.env import Environment
    from dualpath.loadgen.locust_driver import Assignment
    from dualpath.loadgen.locust_user import RETRIES, AgentSession, TurnFailed

    env = Environment(user_classes=[AgentSession], host=sys.argv[1])
    failed = []  # the request events Locust's stats would count as failures
    env.events.request.add_listener(lambda **kw: kw["exception"] and failed.append(kw["name"]))
    user = AgentSession(env)
    a = Assignment(index=0, key="s0", dilation=1.0, t0=time.time(), origin_s=0.0)
    out = {"retries": RETRIES}
    for path in sys.argv[2:]:
        began = time.monotonic()
        try:
            out[path] = {"text": user._turn(a, 3, path, {"session": "s0"})}
        except TurnFailed as exc:
            out[path] = {"error": str(exc)}
        out[path]["s"] = time.monotonic() - began
        out[path]["failed"] = failed.count(path)
    print(json.dumps(out))
    """
)


def _app(seen: Counter[str]) -> web.Application:
    async def turn(request: web.Request) -> web.Response:
        path = request.path
        seen[path] += 1
        if (path == "/twice-busy" and seen[path] <= 2) or path == "/always-busy":
            status = 429 if seen[path] % 2 else 503
            headers = {"Retry-After": str(RETRY_AFTER_S)}
            return web.json_response(_error("busy"), status=status, headers=headers)
        if path == "/bad":
            return web.json_response(_error("no such session"), status=400)
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_post("/{name}", turn)
    return app


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "test"}}


@pytest.mark.asyncio
async def test_refusals_are_retried_after_retry_after_and_nothing_else_is() -> None:
    seen: Counter[str] = Counter()
    runner = web.AppRunner(_app(seen))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host = f"http://127.0.0.1:{runner.addresses[0][1]}"
    paths = ["/twice-busy", "/always-busy", "/bad", "/ok"]
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _TURNS, host, *paths,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        await runner.cleanup()
    assert proc.returncode == 0, err.decode()[-2000:]
    got = json.loads(out.decode().strip().splitlines()[-1])
    retries = got["retries"]

    twice = got["/twice-busy"]
    assert twice["text"] == "" and seen["/twice-busy"] == 3 and twice["failed"] == 2
    assert twice["s"] >= 2 * RETRY_AFTER_S  # it waited the Retry-After each time

    always = got["/always-busy"]
    assert seen["/always-busy"] == retries + 1 and always["failed"] == retries + 1
    assert always["error"].startswith("session s0 turn 3: HTTP ") and "busy" in always["error"]
    assert always["s"] >= retries * RETRY_AFTER_S

    bad = got["/bad"]
    assert seen["/bad"] == 1 and bad["failed"] == 1
    assert bad["error"] == "session s0 turn 3: HTTP 400: no such session"
    assert seen["/ok"] == 1 and got["/ok"]["failed"] == 0
