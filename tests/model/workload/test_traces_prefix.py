"""Prefix identity: the infinite-cache hit definition and the chain plan (forks)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.blocks.chain import ChainRegistry
from dualpath.model.workload.script import Fork
from dualpath.model.workload.traces import ChainPlanner, hit_stats, owner, plan_chains
from dualpath.model.workload.traces.prefix import leading_hits


# --- infinite-cache hit --------------------------------------------------------------------
def test_hit_by_hand() -> None:
    reqs = [
        (200, [1, 2, 3]),  # first seen: miss
        (300, [1, 2, 4, 5]),  # 2 blocks = 128 tokens
        (250, [1, 2, 3, 6]),  # 3 blocks = 192
        (100, [9]),  # miss
        (10, [1]),  # 1 block, capped at the 10-token prompt
        (400, [7, 2, 3]),  # 2 and 3 were seen, but not as a leading run: miss
    ]
    h = hit_stats(reqs, 64)
    assert (h.requests, h.hit_requests, h.tokens, h.hit_tokens) == (6, 3, 1260, 330)
    assert (h.blocks, h.hit_blocks) == (16, 6)
    assert h.token_ratio == 330 / 1260 and h.block_ratio == 6 / 16


def _naive(ids: Sequence[int], seen: set[int]) -> int:
    n = 0
    while n < len(ids) and ids[n] in seen:
        n += 1
    return n


@given(st.lists(st.integers(0, 12), max_size=12), st.sets(st.integers(0, 12)))
def test_leading_hits_is_the_leading_run_for_any_ids(ids: list[int], seen: set[int]) -> None:
    assert leading_hits(ids, seen) == _naive(ids, seen)


# --- chain plan ------------------------------------------------------------------------------
def test_plan_by_hand() -> None:
    reqs = [
        [1, 2, 3],  # root chain 1
        [1, 2, 3, 4, 5],  # ends at chain 1's end: continues it
        [1, 2, 6],  # diverges inside chain 1 after 2 blocks: chain 2 forks it at 2*r
        [1, 2, 6, 7],  # continues chain 2
        [1, 2],  # wholly inside chain 1
        [8],  # root chain 3
        [],  # no blocks: a chain of its own (4)
        [1, 2, 3, 4, 9],  # diverges inside chain 1 at 4: chain 5
        [1, 2, 3, 4, 5, 10],  # chain 1 still ends at 5: continues it
        [1, 2, 6, 11],  # diverges inside chain 2 (after 3 blocks, 2 of them inherited)
    ]
    plan = plan_chains(reqs, ratio=4)
    assert plan.chains == (1, 1, 2, 2, 1, 3, 4, 5, 1, 6)
    assert plan.forks == (Fork(2, 1, 8), Fork(5, 1, 16), Fork(6, 2, 12))
    assert plan.recorded == {1: 24, 2: 16, 3: 4, 4: 0, 5: 20, 6: 16}
    assert owner({f.session: f for f in plan.forks}, 6, 11) == (2, 11)
    assert owner({f.session: f for f in plan.forks}, 6, 7) == (1, 7)


def test_chain_ids_start_at_the_base() -> None:
    planner = ChainPlanner(ratio=1, base=100)
    assert [planner.add(x) for x in ([1], [1, 2], [3], [1, 2, 4])] == [100, 100, 101, 100]
    assert planner.add([1, 5]) == 102 and planner.forks == [Fork(102, 100, 1)]


_ids = st.lists(st.integers(0, 4), max_size=7)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ids, max_size=12), st.sampled_from([1, 2, 8]), st.integers(0, 5))
def test_requests_share_exactly_their_common_prefix(
    reqs: list[list[int]], ratio: int, base: int
) -> None:
    """Any ids (not only chained ones): two requests' emulator blocks resolve to the same
    stored block exactly below their common id prefix."""
    plan = plan_chains(reqs, ratio, base)
    forks = {f.session: f for f in plan.forks}
    assert len(forks) == len(plan.forks)
    where = [
        [owner(forks, c, i) for i in range(len(x) * ratio)]
        for x, c in zip(reqs, plan.chains, strict=True)
    ]
    for a in range(len(reqs)):
        for b in range(a):
            common = _common(reqs[a], reqs[b]) * ratio
            shorter = min(len(reqs[a]), len(reqs[b])) * ratio
            assert where[a][:common] == where[b][:common]
            assert all(where[a][i] != where[b][i] for i in range(common, shorter))
    for x, c in zip(reqs, plan.chains, strict=True):  # every block lies on a recorded part
        assert all(i < plan.recorded[o] for o, i in (owner(forks, c, i) for i in range(len(x))))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ids, max_size=12), st.sampled_from([1, 4]))
def test_forks_are_declarable_parents_first_within_recorded_length(
    reqs: list[list[int]], ratio: int
) -> None:
    plan = plan_chains(reqs, ratio)
    position = {f.session: k for k, f in enumerate(plan.forks)}
    for k, f in enumerate(plan.forks):
        assert position.get(f.parent, -1) < k  # the parent's own fork came first
        assert 1 <= f.at <= plan.recorded[f.parent] and f.at % ratio == 0
        assert f.session in plan.chains
    ChainRegistry().declare_all(plan.forks)  # the block store accepts them (no cycle, at >= 1)
    assert set(plan.chains) <= set(plan.recorded)


@settings(max_examples=100, deadline=None)
@given(st.lists(_ids, max_size=10))
def test_plan_of_chained_ids_matches_the_hit(reqs: list[list[int]]) -> None:
    """With chained ids (an id names its whole prefix), a request's stored prefix is exactly
    the hit the infinite cache counts: blocks already recorded by earlier requests."""
    names: dict[tuple[int, ...], int] = {}  # a prefix -> its id
    chained = [
        [names.setdefault(tuple(x[: i + 1]), len(names)) for i in range(len(x))] for x in reqs
    ]
    planner = ChainPlanner()
    seen: set[int] = set()
    for ids in chained:
        before = planner.recorded()
        hit = leading_hits(ids, seen)
        c = planner.add(ids)
        forks = {f.session: f for f in planner.forks}
        stored = 0
        for i in range(len(ids)):
            o, _ = owner(forks, c, i)
            if i >= before.get(o, 0):
                break
            stored += 1
        assert stored == hit
        seen.update(ids)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
