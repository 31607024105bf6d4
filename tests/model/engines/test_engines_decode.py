"""model/engines/decode.py: the decode unit's chunk announcements (what a stream paces its tokens
by) agree with the request's own timings, also when joins cut chunks short and re-time
their tokens; every block a turn fills is persisted, whole blocks only, before it ends."""

from __future__ import annotations

from typing import Any

from dualpath.model.blocks import BlockRange
from dualpath.model.config.presets import resolve
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.engines.cluster import Cluster
from dualpath.model.entities.request import EngineState, Request
from dualpath.runtimes.virtual.sim import run_offline


def test_announced_token_times_match_the_requests_timings() -> None:
    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
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

    def setup(cluster: Cluster) -> None:
        for unit in cluster.decode_units:
            unit._on_progress = on_progress

    run_offline(sc, setup=setup)
    assert reqs and cuts > 0  # the scenario exercises re-announcement
    for rid, times in planned.items():
        req = reqs[rid]
        assert sorted(times) == list(range(2, req.gen + 1)), rid
        assert abs(times[2] - req.t_second) < 1e-9
        assert abs(times[req.gen] - req.t_last) < 1e-9
        ordered = [times[j] for j in range(2, req.gen + 1)]
        assert ordered == sorted(ordered)


def test_every_filled_block_is_persisted_before_the_turn_ends() -> None:
    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
    ended: list[tuple[Request, int]] = []  # each turn with the blocks persisted by its end
    shipped: list[tuple[int, float, float]] = []  # (blocks, bytes, bytes of that many blocks)

    def setup(cluster: Cluster) -> None:
        for unit in cluster.decode_units:
            ship, complete = unit.ship, unit._complete

            def record_ship(
                ranges: list[BlockRange], nbytes: float, de: EngineState, ship: Any = ship
            ) -> None:
                blocks = sum(r.nblocks for r in ranges)
                shipped.append((blocks, nbytes, blocks * cluster.scheduler.ctx.full_block_bytes))
                ship(ranges, nbytes, de)

            def record_end(req: Request, complete: Any = complete) -> None:
                ended.append((req, req.persisted_blocks))
                complete(req)

            unit.ship = record_ship  # type: ignore[method-assign]
            unit._complete = record_end  # type: ignore[method-assign]

    outcome = run_offline(sc, setup=setup)
    cluster = outcome.cluster
    core = cluster.clock
    assert isinstance(core, VirtualCore)
    core.call_at(core.now() + 10.0, core.stop)  # virtual time: the last turns' persists land
    core.run()
    store = cluster.scheduler.ctx.store
    for req, _ in ended:  # and the store holds them (a chain can only grow)
        assert store.prefix_blocks(req.session) >= req.persisted_blocks, req.rid
    bt = sc.engine.block_tokens
    assert len(ended) == sum(len(s.turns) for s in outcome.workload.scripts)
    for req, persisted in ended:  # the newest token has no KV yet: (prompt + gen - 1) tokens
        assert persisted == (req.prompt + req.gen - 1) // bt, (req.rid, req.prompt, req.gen)
    assert shipped and all(blocks > 0 and nbytes == want for blocks, nbytes, want in shipped)


def test_step_statistics_add_up_to_the_turns() -> None:
    """vLLM's per-step metrics (model/entities/steps.py) on virtual time: the engines' step tokens
    are the prompt tokens prefilled plus every token generated, and the inter-token gaps are
    one per token after the first and add up to each turn's decode time."""
    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
    metrics: list[Any] = []

    metrics.append(run_offline(sc).cluster.metrics)
    (m,) = metrics
    done = m.requests
    assert done and not m.failed
    steps = m.steps.values()
    tokens = sum(s.iteration_tokens.total for s in steps)
    assert tokens == sum(r.prompt - r.hit + r.gen for r in done)
    assert sum(s.inter_token.n for s in steps) == sum(r.gen - 1 for r in done)
    gaps = sum(s.inter_token.total for s in steps)
    assert abs(gaps - sum(r.t_last - r.t_first for r in done)) < 1e-6
    assert all(s.preemptions == 0 for s in steps)
    # per engine: a histogram's buckets hold every observation
    for s in steps:
        assert s.iteration_tokens.cumulative()[-1][1] == s.iteration_tokens.n


def test_running_batches_show_each_des_batch_while_it_decodes() -> None:
    """The read-only view a runtime's gauges use (runtimes/process/serving/node_io.py): every DE of
    the unit,
    in engine order, with its running requests and their context; empty once all ended."""
    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
    seen: list[tuple[list[str], int, int]] = []  # (engine ids, running, context tokens)
    after: list[tuple[int, int]] = []

    def setup(cluster: Cluster) -> None:
        units, clock = cluster.decode_units, cluster.clock

        def sample() -> None:
            for unit in units:
                views = unit.running_batches()
                n, ctx = sum(v.running for v in views), sum(v.context_tokens for v in views)
                seen.append(([v.engine_id for v in views], n, ctx))
            clock.call_at(clock.now() + 0.05, sample)

        sample()

    units = run_offline(sc, setup=setup).cluster.decode_units
    engines = [[e.engine_id for e in unit.engines] for unit in units]
    assert all(ids in engines for ids, _, _ in seen)
    views = [v for unit in units for v in unit.running_batches()]
    after.extend((v.running, v.context_tokens) for v in views)
    assert max(n for _, n, _ in seen) >= 2  # batches of several requests were seen
    assert all(ctx >= n * 1000 for _, n, ctx in seen)  # every smoke prompt is >1K tokens
    assert after and set(after) == {(0, 0)}
