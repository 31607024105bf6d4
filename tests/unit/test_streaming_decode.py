"""The decode unit's chunk announcements (what a stream paces its tokens by) agree with
the request's own timings, also when joins cut chunks short and re-time their tokens."""

from __future__ import annotations

import asyncio

from dualpath.config.presets import resolve
from dualpath.core.clock import VirtualClock
from dualpath.engines.request import Request
from dualpath.runtime.sim import (
    RequestIds,
    make_workload,
    run_agent,
    run_virtual_loop,
    running,
    until_done_or_fatal,
)


def test_announced_token_times_match_the_requests_timings() -> None:
    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
    workload = make_workload(sc)
    planned: dict[int, dict[int, float]] = {}  # rid -> token index -> latest announced time
    reqs: dict[int, Request] = {}
    cuts = 0

    def on_progress(req: Request, tokens: int, chunk: int, t_last: float, step: float) -> None:
        nonlocal cuts
        times = planned.setdefault(req.rid, {})
        reqs[req.rid] = req
        first = tokens - chunk + 1
        cuts += first in times  # re-announced: a join cut the previous chunk
        for j in range(first, tokens + 1):
            times[j] = t_last - (tokens - j) * step

    async def main(clock: VirtualClock) -> None:
        async with running(sc, clock, workload) as cluster:
            for unit in cluster.decode_units:
                unit._on_progress = on_progress
            ids = RequestIds()
            agents = asyncio.gather(
                *(run_agent(cluster, s, ids, lambda: None) for s in workload.scripts)
            )
            await until_done_or_fatal(cluster, agents)

    run_virtual_loop(main)
    assert reqs and cuts > 0  # the scenario exercises re-announcement
    for rid, times in planned.items():
        req = reqs[rid]
        assert sorted(times) == list(range(2, req.gen + 1)), rid
        assert abs(times[2] - req.t_second) < 1e-9
        assert abs(times[req.gen] - req.t_last) < 1e-9
        ordered = [times[j] for j in range(2, req.gen + 1)]
        assert ordered == sorted(ordered)
