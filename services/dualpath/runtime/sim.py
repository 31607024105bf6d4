"""Runtime 2: the whole emulated cluster in one process on virtual time.

Deterministic for a seed, no sockets, much faster than real time. The same engine,
scheduler and link objects run in the process runtime on a dilated real clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dualpath.config.settings import Scenario
from dualpath.core.clock import VirtualClock, VirtualTimeLoop
from dualpath.engines.request import Request
from dualpath.report.build import build_report
from dualpath.runtime.cluster import Cluster, build_cluster
from dualpath.workload import Trajectory, parse_max_len, synthetic_trajectories

Progress = Callable[[int, int], None]  # (turns done, turns total)


@dataclass(slots=True)
class SimOutcome:
    cluster: Cluster
    jct_s: float
    wall_s: float
    trajectories: list[Trajectory]


def make_trajectories(sc: Scenario) -> list[Trajectory]:
    w = sc.workload
    return synthetic_trajectories(
        parse_max_len(w.max_len), w.agents, sc.seed, w.append_scale, w.gen_scale
    )


def mean_shape(trajs: Sequence[Trajectory]) -> tuple[int, int]:
    """Mean prompt context and mean append per request: the shape β is profiled at."""
    n = ctx_sum = app_sum = 0
    for t in trajs:
        context = 0
        for turn in t.turns:
            ctx_sum += context
            app_sum += turn.append
            context += int(turn.append) + int(turn.gen)
            n += 1
    return (ctx_sum // max(1, n), app_sum // max(1, n))


async def _agent(
    cluster: Cluster, traj: Trajectory, next_rid: Callable[[], int], on_turn: Callable[[], None]
) -> None:
    loop = asyncio.get_running_loop()
    context = 0
    for i, turn in enumerate(traj.turns):
        req = Request(
            rid=next_rid(),
            session=traj.agent_id,
            turn=i,
            prompt=context + int(turn.append),
            gen=int(turn.gen),
            arrival=cluster.clock.now(),
            done=loop.create_future(),
        )
        cluster.scheduler.submit(req)
        await req.done
        on_turn()
        context += int(turn.append) + int(turn.gen)


async def _offline(
    clock: VirtualClock, sc: Scenario, trajs: list[Trajectory], progress: Progress | None
) -> tuple[Cluster, float]:
    ctx, app = mean_shape(trajs)
    cluster = build_cluster(sc, clock, ctx, app)
    loop = asyncio.get_running_loop()
    fatal = cluster.scheduler.fatal

    def on_error(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # A failing callback (e.g. a block that fails verification on persist) must end the
        # run loudly, not be logged and skipped.
        exc = context.get("exception") or RuntimeError(str(context.get("message")))
        if not fatal.done():
            fatal.set_exception(exc)

    loop.set_exception_handler(on_error)
    runs = [u.run() for u in cluster.prefill_units] + [u.run() for u in cluster.decode_units]
    units = [loop.create_task(r) for r in runs]
    total = sum(len(t.turns) for t in trajs)
    counter = iter(range(1 << 62))
    done = 0

    def on_turn() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    agents = asyncio.gather(*(_agent(cluster, t, lambda: next(counter), on_turn) for t in trajs))
    try:
        waits: list[asyncio.Future[Any]] = [agents, cluster.scheduler.fatal]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if cluster.scheduler.fatal.done():
            cluster.scheduler.fatal.result()  # re-raises the failure (e.g. a corrupted block)
        agents.result()
        return cluster, clock.now()
    finally:
        agents.cancel()
        for task in units:
            task.cancel()
        await asyncio.gather(*units, return_exceptions=True)
        await asyncio.gather(agents, return_exceptions=True)


def run_offline(sc: Scenario, progress: Progress | None = None) -> SimOutcome:
    """N agents start together and run their whole trajectories; JCT when all finish."""
    trajs = make_trajectories(sc)
    loop = VirtualTimeLoop()
    t0 = time.perf_counter()
    try:
        cluster, jct = loop.run_until_complete(_offline(VirtualClock(loop), sc, trajs, progress))
    finally:
        loop.close()
    cluster.metrics.end_time = jct
    return SimOutcome(cluster, jct, time.perf_counter() - t0, trajs)


def simulate(sc: Scenario, progress: Progress | None = None) -> dict[str, Any]:
    """Run a scenario on virtual time and return the report (schema dualpath.report/v1)."""
    outcome = run_offline(sc, progress)
    return build_report(outcome.cluster, outcome.jct_s, outcome.wall_s)
