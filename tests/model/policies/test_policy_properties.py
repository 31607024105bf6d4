"""Hypothesis properties of every registered scheduling policy.

Random engine states and queues; each fetch is replayed step by step against the state the
policy saw at that moment: β is respected, nothing is lost or duplicated, FIFO is kept, HBM
is never over-committed, and DualPath's choices are the argmins its rules name.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dualpath.model.entities.request import EngineState, NodeState, Request
from dualpath.model.policies.base import Limits, prefill_tokens, quota_batch
from dualpath.model.policies.dualpath import DualPath
from dualpath.model.policies.registry import default_registry

NAMES = default_registry().names()
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# α and β from a small set, and engine values that often sit exactly on them: the
# boundaries (read_q == α is short, tok == β is not overloaded) get exercised.
EDGES = (0, 1000, 1001, 2500, 2501)
limits_st = st.builds(
    Limits,
    alpha=st.sampled_from([0, 1000, 2500]),
    beta=st.sampled_from([0, 1000, 2500]),
    compute_quota_s=st.just(0.3),
    kv_bytes_per_token=st.integers(1, 16),
    z_factor=st.sampled_from([1.0, 1.05, 1.5]),
)
edgy_st = st.one_of(st.sampled_from(EDGES), st.integers(0, 4000))
# (tok, read_q, seq, free_hbm in tokens of KV)
engine_st = st.tuples(edgy_st, edgy_st, st.integers(0, 12), st.integers(0, 6000))
# (prompt, gen, estimated-hit fraction)
request_st = st.tuples(st.integers(1, 3000), st.integers(0, 800), st.floats(0.0, 1.0))


@contextmanager
def _loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    try:
        yield lp
    finally:
        lp.close()


def _requests(
    loop: asyncio.AbstractEventLoop, specs: Sequence[tuple[int, int, float]]
) -> list[Request]:
    out = []
    for i, (prompt, gen, frac) in enumerate(specs):
        hit = min(prompt - 1, int(frac * prompt))  # the scheduler caps hits at prompt-1
        fut: asyncio.Future[None] = loop.create_future()
        out.append(
            Request(
                rid=i,
                session=i,
                turn=0,
                prompt=prompt,
                gen=gen,
                arrival=0.0,
                done=fut,
                hit=hit,
            )
        )
    return out


def _engines(
    specs: Sequence[tuple[int, int, int, int]], kv: int, role: str = "prefill", group: int = 0
) -> list[EngineState]:
    """Engines two per node (so nodes share read_q), indices in shuffled-ish list order."""
    nodes = [NodeState(f"{role}{k}", role, k) for k in range((len(specs) + 1) // 2)]
    out = []
    for i, (tok, read_q, seq, free_tokens) in enumerate(specs):
        node = nodes[i // 2]
        node.read_q = max(node.read_q, read_q)
        out.append(
            EngineState(
                f"{role}-{group}-{i}",
                index=(7 * i + 3) % 11 + 11 * group,  # distinct, not in list order
                node=node,
                group=group,
                gpu=i,
                seq=seq,
                tok=tok,
                free_hbm=float(free_tokens * kv),
            )
        )
    return out


def _ids(reqs: Sequence[Request]) -> list[int]:
    return [id(r) for r in reqs]


# --- PE fetch: (a) β, (b) no loss / FIFO, (e) DualPath argmin ------------------------------


@pytest.mark.parametrize("name", NAMES)
@PROPS
@given(
    limits=limits_st,
    engine_specs=st.lists(engine_st, min_size=1, max_size=6),
    fetches=st.lists(st.lists(request_st, max_size=12), min_size=1, max_size=3),
    seed=st.integers(0, 3),
)
def test_prefill_fetch_respects_beta_keeps_fifo_and_loses_nothing(
    name: str,
    limits: Limits,
    engine_specs: list[tuple[int, int, int, int]],
    fetches: list[list[tuple[int, int, float]]],
    seed: int,
) -> None:
    policy = default_registry().create(name, limits, seed)
    engines = _engines(engine_specs, limits.kv_bytes_per_token)
    queue: deque[Request] = deque()
    with _loop() as loop:
        for specs in fetches:  # several fetches: stateful policies (round robin) carry over
            queue.extend(_requests(loop, specs))
            original = list(queue)
            tok = {id(e): e.tok for e in engines}
            seq = {id(e): e.seq for e in engines}
            out = policy.assign_prefill(queue, engines)

            # (b) assigned, in order, then remaining == the original queue (by identity).
            assert _ids([r for r, _ in out]) + _ids(queue) == _ids(original)
            for req, engine in out:
                assert any(engine is e for e in engines)
                # (a) never to an engine over β at that moment (unless the policy has no
                # β guard on purpose: basic, the paper's Basic, docs/fidelity.md).
                assert tok[id(engine)] <= limits.beta or not policy.beta_guard
                if isinstance(policy, DualPath):
                    _check_dualpath_pe_pick(engine, engines, tok, limits)
                tok[id(engine)] += prefill_tokens(req)
                seq[id(engine)] += 1
            assert all(e.tok == tok[id(e)] and e.seq == seq[id(e)] for e in engines)
            # A fetch only stops early when every engine is overloaded.
            if queue:
                assert all(e.tok > limits.beta for e in engines)
            # Let the engines finish some work before the next fetch.
            for e in engines:
                e.tok //= 2


def _check_dualpath_pe_pick(
    chosen: EngineState, engines: Sequence[EngineState], tok: dict[int, int], limits: Limits
) -> None:
    """(e) the pick is the (tok, read_q, index) argmin of category 2, else of category 3."""
    ok = [e for e in engines if tok[id(e)] <= limits.beta]
    short = [e for e in ok if e.node.read_q <= limits.alpha]
    pool = short or [e for e in ok if e.node.read_q > limits.alpha]
    assert any(chosen is e for e in pool)
    best = min((tok[id(e)], e.node.read_q, e.index) for e in pool)
    assert best == (tok[id(chosen)], chosen.node.read_q, chosen.index)


# --- DE level 1: (d) every request once, global queue drained ------------------------------


@pytest.mark.parametrize("name", NAMES)
@PROPS
@given(
    limits=limits_st,
    group_specs=st.lists(st.lists(engine_st, min_size=1, max_size=3), min_size=1, max_size=3),
    backlog=st.lists(st.lists(request_st, max_size=3), min_size=3, max_size=3),
    fetches=st.lists(st.lists(request_st, max_size=10), min_size=1, max_size=3),
    seed=st.integers(0, 3),
)
def test_decode_group_level_assigns_every_request_exactly_once(
    name: str,
    limits: Limits,
    group_specs: list[list[tuple[int, int, int, int]]],
    backlog: list[list[tuple[int, int, float]]],
    fetches: list[list[tuple[int, int, float]]],
    seed: int,
) -> None:
    policy = default_registry().create(name, limits, seed)
    kv = limits.kv_bytes_per_token
    groups = [_engines(s, kv, "decode", g) for g, s in enumerate(group_specs)]
    with _loop() as loop:
        private = [deque(_requests(loop, backlog[g])) for g in range(len(groups))]
        for specs in fetches:
            queue = deque(_requests(loop, specs))
            original = list(queue)
            private_before = [_ids(p) for p in private]
            load = [
                sum(e.tok for e in g) + sum(r.length for r in p)
                for g, p in zip(groups, private, strict=True)
            ]
            out = policy.assign_decode_groups(queue, groups, private)

            assert not queue
            assert _ids([r for r, _ in out]) == _ids(original)  # each once, in queue order
            assert [_ids(p) for p in private] == private_before  # read-only
            for req, gi in out:
                assert 0 <= gi < len(groups)
                if isinstance(policy, DualPath):  # the least-loaded group, load kept current
                    assert min((v, i) for i, v in enumerate(load)) == (load[gi], gi)
                load[gi] += req.length
            for req, gi in out:  # the shell moves them to the private queues
                private[gi].append(req)


# --- DE level 2: (b) no loss / FIFO, (c) HBM, DualPath's Z rule ----------------------------


@pytest.mark.parametrize("name", NAMES)
@PROPS
@given(
    limits=limits_st,
    engine_specs=st.lists(engine_st, min_size=1, max_size=5),
    fetches=st.lists(st.lists(request_st, max_size=10), min_size=1, max_size=3),
    seed=st.integers(0, 3),
)
def test_decode_engine_level_never_overcommits_hbm_and_keeps_order(
    name: str,
    limits: Limits,
    engine_specs: list[tuple[int, int, int, int]],
    fetches: list[list[tuple[int, int, float]]],
    seed: int,
) -> None:
    policy = default_registry().create(name, limits, seed)
    kv = limits.kv_bytes_per_token
    engines = _engines(engine_specs, kv, "decode")
    private: deque[Request] = deque()
    with _loop() as loop:
        for specs in fetches:
            private.extend(_requests(loop, specs))
            original = list(private)
            free = {id(e): e.free_hbm for e in engines}
            tok = {id(e): e.tok for e in engines}
            seq = {id(e): e.seq for e in engines}
            z = None
            if isinstance(policy, DualPath):
                z = policy.high_token_threshold(private, engines)
            out = policy.assign_decode(private, engines)

            assert _ids([r for r, _ in out]) + _ids(private) == _ids(original)
            for req, engine in out:
                assert any(engine is e for e in engines)
                need = req.length * kv
                assert free[id(engine)] >= need  # (c) it had the HBM at that moment
                if z is not None:
                    _check_dualpath_de_pick(req, engine, engines, free, tok, seq, z, kv)
                free[id(engine)] -= need
                tok[id(engine)] += req.length
                seq[id(engine)] += 1
            assert all(e.free_hbm >= 0 for e in engines)  # (c) never over-committed
            assert all(
                e.free_hbm == free[id(e)] and e.tok == tok[id(e)] and e.seq == seq[id(e)]
                for e in engines
            )
            if private:  # stopped only because the head fits on no DE
                assert all(e.free_hbm < private[0].length * kv for e in engines)
            # Some requests finish before the next fetch and give their HBM back.
            for req, engine in out[::2]:
                engine.free_hbm += req.length * kv
                engine.tok -= req.length
                engine.seq -= 1


def _check_dualpath_de_pick(
    req: Request,
    chosen: EngineState,
    engines: Sequence[EngineState],
    free: dict[int, float],
    tok: dict[int, int],
    seq: dict[int, int],
    z: float,
    kv: int,
) -> None:
    fits = [e for e in engines if free[id(e)] >= req.length * kv]
    low = [e for e in fits if tok[id(e)] + req.length <= z]
    if low:
        assert any(chosen is e for e in low)
        assert min((seq[id(e)], e.index) for e in low) == (seq[id(chosen)], chosen.index)
    else:
        assert min((tok[id(e)], e.index) for e in fits) == (tok[id(chosen)], chosen.index)


@PROPS
@given(
    limits=limits_st,
    engine_specs=st.lists(engine_st, min_size=1, max_size=5),
    specs=st.lists(request_st, max_size=10),
)
def test_high_token_threshold_matches_its_definition(
    limits: Limits,
    engine_specs: list[tuple[int, int, int, int]],
    specs: list[tuple[int, int, float]],
) -> None:
    policy = default_registry().create("dualpath", limits, 0)
    assert isinstance(policy, DualPath)
    kv = limits.kv_bytes_per_token
    engines = _engines(engine_specs, kv, "decode")
    with _loop() as loop:
        private = _requests(loop, specs)
        total_free = sum(e.free_hbm for e in engines)
        # R: the longest prefix whose KV fits the group's total free HBM.
        r_len = 0
        for k in range(len(private), -1, -1):
            if sum(r.length for r in private[:k]) * kv <= total_free:
                r_len = sum(r.length for r in private[:k])
                break
        want = limits.z_factor * (r_len + sum(e.tok for e in engines)) / len(engines)
        assert policy.high_token_threshold(private, engines) == pytest.approx(want)


# --- (f) quota_batch -------------------------------------------------------------------------


@PROPS
@given(
    shapes=st.lists(st.tuples(st.integers(1, 4000), st.integers(0, 4000)), max_size=8),
    a=st.floats(1e-10, 1e-6),  # quadratic coefficient (attention: new x context)
    b=st.floats(0.0, 1e-4),  # per new token
    c=st.floats(0.0, 0.4),  # fixed per batch (may exceed the quota on its own)
    hbm_tokens=st.one_of(st.none(), st.integers(0, 20_000)),
)
def test_quota_batch_stays_within_quota_and_never_over_computes(
    shapes: list[tuple[int, int]],
    a: float,
    b: float,
    c: float,
    hbm_tokens: int | None,
) -> None:
    limits = Limits(alpha=1, beta=1, compute_quota_s=0.3, kv_bytes_per_token=4)
    hbm = None if hbm_tokens is None else float(hbm_tokens * limits.kv_bytes_per_token)

    def cost(batch: Sequence[tuple[int, int]]) -> float:
        return c + sum(a * n * (cached + n) + b * n for cached, n in batch)

    def fits(items: list[tuple[int, int]]) -> bool:
        t_ok = cost(items) <= limits.compute_quota_s * (1 + 1e-9)
        hbm_ok = hbm is None or sum(x + n for x, n in items) * limits.kv_bytes_per_token <= hbm
        return t_ok and hbm_ok

    with _loop() as loop:
        ready: deque[Request] = deque()
        for i, (missing, cached) in enumerate(shapes):
            req = _requests(loop, [(cached + missing, 0, 0.0)])[0]
            req.rid, req.computed = i, cached
            ready.append(req)
        original = list(ready)
        batch = quota_batch(ready, cost, limits, hbm)

    assert bool(batch) == bool(original)
    # A FIFO prefix of the ready queue; only the last item may be a partial chunk.
    assert _ids([i.request for i in batch]) == _ids(original[: len(batch)])
    items = [(i.request.computed, i.new_tokens) for i in batch]
    for k, item in enumerate(batch):
        remaining = item.request.prompt - item.request.computed
        assert 1 <= item.new_tokens <= remaining
        if k < len(batch) - 1:
            assert item.new_tokens == remaining
    if not batch:
        return
    last = batch[-1]
    chunked = last.new_tokens < last.request.prompt - last.request.computed
    assert _ids(ready) == _ids(original[len(batch) - 1 :] if chunked else original[len(batch) :])
    forced = len(batch) == 1 and last.new_tokens == 1
    if not forced:
        assert fits(items)  # within the quota (and HBM when not layerwise)
    # Maximal: one more token of the last item, or one token of the next request, busts it.
    if chunked:
        assert not fits([*items[:-1], (items[-1][0], items[-1][1] + 1)])
    elif ready:
        assert not fits([*items, (ready[0].computed, 1)])
