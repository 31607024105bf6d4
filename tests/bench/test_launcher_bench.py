"""`make bench`'s process-runtime point: a cluster that sheds load (429) is measured, not a
crash (the agents wait as told, the point is not counted as sustained)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from dualpath.bench.process import _agents


async def _serve_then_measure() -> tuple[list[float], dict[int, int]]:
    calls = 0

    async def turn(_: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        if calls <= 3:
            return web.json_response(
                {"error": {"message": "queue full"}}, status=429, headers={"Retry-After": "0"}
            )
        return web.json_response({"latency_s": 0.25})

    app = web.Application()
    app.router.add_post("/v1/agent/turn", turn)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        lat, refused = await _agents(f"127.0.0.1:{port}", 2, 0.5)
    finally:
        await runner.cleanup()
    return lat, dict(refused)


def test_refused_turns_are_counted_and_the_agents_go_on() -> None:
    lat, refused = asyncio.run(_serve_then_measure())
    assert refused == {429: 3}
    assert lat and all(x == 0.25 for x in lat)
