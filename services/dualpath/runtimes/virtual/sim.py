"""The virtual-time runtime: the whole emulated cluster in one process on virtual time.

Deterministic for a seed, no sockets, much faster than real time. The same engine,
scheduler and link objects run in the process runtime on a dilated real clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.core.clock import VirtualClock, VirtualTimeLoop
from dualpath.model.core.collector import sparse_collection
from dualpath.model.engines.cluster import Cluster
from dualpath.model.entities.request import Request
from dualpath.model.workload.script import AgentScript, Workload, mean_shape
from dualpath.report.build import build_report, workload_section
from dualpath.report.schema import check_report
from dualpath.runtimes.cluster import build_cluster

Progress = Callable[[int, int], None]  # (done, total): turns offline, emulated s online


@dataclass(slots=True)
class SimOutcome:
    cluster: Cluster
    jct_s: float
    wall_s: float
    workload: Workload
    online: dict[str, Any] | None = None


def make_workload(sc: Scenario, n_agents: int | None = None) -> Workload:
    """The scenario's agent scripts: synthetic (Table 2) or a trace (`workload.source`)."""
    return build_workload(sc, n_agents)


class RequestIds:
    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


async def run_agent(
    cluster: Cluster,
    script: AgentScript,
    next_rid: Callable[[], int],
    on_turn: Callable[[], None],
    *,
    think_time_s: float | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> None:
    """Replay one session turn by turn, each after the previous one's last token and its
    think time (the script's, or `think_time_s` when given)."""
    for i, turn in enumerate(script.turns):
        think = turn.think_s if think_time_s is None else think_time_s
        if i and think > 0:
            await cluster.clock.sleep(think)
        if not keep_going():
            return
        await submit_turn(cluster, script, i, next_rid())
        on_turn()


async def submit_turn(cluster: Cluster, script: AgentScript, i: int, rid: int) -> None:
    """One turn as a request on its KV chain; returns when its last token is out."""
    turn = script.turns[i]
    req = Request(
        rid=rid,
        session=turn.chain,
        turn=i,
        prompt=turn.prompt,
        gen=turn.gen,
        arrival=cluster.clock.now(),
        done=asyncio.get_running_loop().create_future(),
    )
    cluster.scheduler.submit(req)
    await req.done


async def run_open_loop(
    cluster: Cluster, script: AgentScript, next_rid: Callable[[], int], on_turn: Callable[[], None]
) -> None:
    """Open-loop replay: every turn at its own trace time, whether or not the one before it
    has finished (what a trace's timestamps say, not what the cluster allows)."""

    async def one(i: int) -> None:
        await cluster.clock.sleep_until(script.turns[i].at_s)
        await submit_turn(cluster, script, i, next_rid())
        on_turn()

    await asyncio.gather(*(one(i) for i in range(len(script.turns))))


@asynccontextmanager
async def running(sc: Scenario, clock: VirtualClock, workload: Workload) -> AsyncIterator[Cluster]:
    """Build the cluster, start its engines, and make any failure end the run loudly."""
    ctx, app = mean_shape(workload.scripts)
    cluster = build_cluster(sc, clock, ctx, app)
    cluster.scheduler.ctx.chains.declare_all(workload.forks)  # shared prefixes of a trace
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
    clock: VirtualClock, sc: Scenario, workload: Workload, progress: Progress | None
) -> tuple[Cluster, float]:
    async with running(sc, clock, workload) as cluster:
        total = sum(len(s.turns) for s in workload.scripts)
        done = 0

        def on_turn() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total)

        ids = RequestIds()
        agents = asyncio.gather(*(_replay(sc, cluster, s, ids, on_turn) for s in workload.scripts))
        await until_done_or_fatal(cluster, agents)
        return cluster, clock.now()


async def _replay(
    sc: Scenario,
    cluster: Cluster,
    script: AgentScript,
    ids: RequestIds,
    on_turn: Callable[[], None],
) -> None:
    """Offline: a session starts at its `start_s` (0 for synthetic agents: all together)."""
    if sc.workload.replay == "open-loop":
        await run_open_loop(cluster, script, ids, on_turn)
        return
    if script.start_s > 0:
        await cluster.clock.sleep_until(script.start_s)
    await run_agent(cluster, script, ids, on_turn)


T = TypeVar("T")


def run_virtual_loop(main: Callable[[VirtualClock], Coroutine[Any, Any, T]]) -> T:
    """Run `main` on a fresh virtual-time loop. On Ctrl-C the tasks are cancelled and the
    loop closed cleanly before KeyboardInterrupt propagates (no 'loop is closed' noise)."""
    loop = VirtualTimeLoop()
    try:
        with sparse_collection():
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
    workload = make_workload(sc)
    t0 = time.perf_counter()
    cluster, jct = run_virtual_loop(lambda clock: _offline(clock, sc, workload, progress))
    cluster.metrics.end_time = jct
    return SimOutcome(cluster, jct, time.perf_counter() - t0, workload)


def simulate(sc: Scenario, progress: Progress | None = None) -> dict[str, Any]:
    """Run a scenario on virtual time and return the report (schema dualpath.report/v1)."""
    if sc.workload.mode == "online":
        from dualpath.runtimes.virtual.online import run_online

        outcome = run_online(sc, progress)
    else:
        outcome = run_offline(sc, progress)
    report = build_report(outcome.cluster, outcome.jct_s, outcome.wall_s, outcome.workload)
    report["workload"] = workload_section(outcome.workload)
    if outcome.online is not None:
        report["online"] = outcome.online
    check_report(report)  # against docs/report.schema.json when $DUALPATH_VALIDATE_REPORTS
    return report
