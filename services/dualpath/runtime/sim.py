"""Runtime 2: the whole emulated cluster in one process on virtual time.

Deterministic for a seed, no sockets, much faster than real time. The same engine,
scheduler and link objects run in the process runtime on a dilated real clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from dualpath.config.settings import Scenario
from dualpath.core.clock import VirtualClock, VirtualTimeLoop
from dualpath.engines.request import Request
from dualpath.report.build import build_report
from dualpath.runtime.cluster import Cluster, build_cluster
from dualpath.workload import Trajectory, parse_max_len, synthetic_trajectories

Progress = Callable[[int, int], None]  # (done, total): turns offline, emulated s online


@dataclass(slots=True)
class SimOutcome:
    cluster: Cluster
    jct_s: float
    wall_s: float
    trajectories: list[Trajectory]
    online: dict[str, Any] | None = None


def make_trajectories(sc: Scenario, n_agents: int | None = None) -> list[Trajectory]:
    w = sc.workload
    return synthetic_trajectories(
        parse_max_len(w.max_len), n_agents or w.agents, sc.seed, w.append_scale, w.gen_scale
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


class RequestIds:
    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


async def run_agent(
    cluster: Cluster,
    traj: Trajectory,
    next_rid: Callable[[], int],
    on_turn: Callable[[], None],
    *,
    think_time_s: float = 0.0,
    keep_going: Callable[[], bool] = lambda: True,
) -> None:
    """Replay one trajectory: each turn's prompt is the whole context so far plus its append."""
    loop = asyncio.get_running_loop()
    context = 0
    for i, turn in enumerate(traj.turns):
        if i and think_time_s > 0:
            await cluster.clock.sleep(think_time_s)
        if not keep_going():
            return
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


@asynccontextmanager
async def running(
    sc: Scenario, clock: VirtualClock, trajs: Sequence[Trajectory]
) -> AsyncIterator[Cluster]:
    """Build the cluster, start its engines, and make any failure end the run loudly."""
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
    try:
        yield cluster
    finally:
        cluster.scheduler.stop()
        for task in units:
            task.cancel()
        await asyncio.gather(*units, return_exceptions=True)


async def until_done_or_fatal(cluster: Cluster, work: asyncio.Future[Any]) -> None:
    """Wait for `work`; a fatal engine error (e.g. a corrupted block) wins and re-raises."""
    fatal = cluster.scheduler.fatal
    try:
        await asyncio.wait([work, fatal], return_when=asyncio.FIRST_COMPLETED)
        if fatal.done():
            fatal.result()
        work.result()
    finally:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)


async def _offline(
    clock: VirtualClock, sc: Scenario, trajs: list[Trajectory], progress: Progress | None
) -> tuple[Cluster, float]:
    async with running(sc, clock, trajs) as cluster:
        total = sum(len(t.turns) for t in trajs)
        done = 0

        def on_turn() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total)

        ids = RequestIds()
        agents = asyncio.gather(*(run_agent(cluster, t, ids, on_turn) for t in trajs))
        await until_done_or_fatal(cluster, agents)
        return cluster, clock.now()


T = TypeVar("T")


def run_virtual_loop(main: Callable[[VirtualClock], Coroutine[Any, Any, T]]) -> T:
    """Run `main` on a fresh virtual-time loop. On Ctrl-C the tasks are cancelled and the
    loop closed cleanly before KeyboardInterrupt propagates (no 'loop is closed' noise)."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(VirtualClock(loop)))
    except KeyboardInterrupt:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.set_exception_handler(lambda _loop, _ctx: None)  # cancelled work is not news
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        raise
    finally:
        loop.close()


def run_offline(sc: Scenario, progress: Progress | None = None) -> SimOutcome:
    """N agents start together and run their whole trajectories; JCT when all finish."""
    trajs = make_trajectories(sc)
    t0 = time.perf_counter()
    cluster, jct = run_virtual_loop(lambda clock: _offline(clock, sc, trajs, progress))
    cluster.metrics.end_time = jct
    return SimOutcome(cluster, jct, time.perf_counter() - t0, trajs)


def simulate(sc: Scenario, progress: Progress | None = None) -> dict[str, Any]:
    """Run a scenario on virtual time and return the report (schema dualpath.report/v1)."""
    if sc.workload.mode == "online":
        from dualpath.runtime.online import run_online

        outcome = run_online(sc, progress)
    else:
        outcome = run_offline(sc, progress)
    report = build_report(outcome.cluster, outcome.jct_s, outcome.wall_s)
    if outcome.online is not None:
        report["online"] = outcome.online
    return report
