"""The host-DRAM KV tier (pure model) and the policies built on it (docs/tier.md)."""

from __future__ import annotations

import asyncio
import random
from collections import deque

import pytest

from dualpath.model.blocks.tier import DramTier, TierRead, TierSet
from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import Limits
from dualpath.model.policies.registry import default_registry
from dualpath.model.policies.tier import DualPathTier, HiCache

LIMITS = Limits(alpha=1000, beta=1000, compute_quota_s=0.3, kv_bytes_per_token=10)


def _check(t: DramTier) -> None:
    assert t.used == sum(t.runs.values()) <= t.capacity
    assert all(n > 0 for n in t.runs.values())


def test_lru_evicts_the_least_recent_session_from_its_tail() -> None:
    t = DramTier("n", 10, "lru")
    t.fill(1, 0, 4)
    t.fill(2, 0, 4)
    t.touch(1, hit=True)  # 2 is now the least recent
    assert t.fill(3, 0, 4) == 4
    # only the 2 blocks needed went, from the tail of session 2: [0, 2) is still of use
    assert t.runs == {1: 4, 2: 2, 3: 4}
    assert (t.evicted_blocks, t.evicted_sessions) == (2, 0)
    _check(t)
    t.fill(4, 0, 4)  # 2 loses its last 2 blocks and leaves; then 1 (older than 3) loses 2
    assert t.runs == {1: 2, 3: 4, 4: 4}
    assert (t.evicted_blocks, t.evicted_sessions) == (6, 1)
    assert t.peak == 10
    _check(t)


def test_lfu_keeps_the_session_matched_most_where_lru_drops_it() -> None:
    victims = {}
    for policy in ("lru", "lfu"):
        t = DramTier("n", 8, policy)  # type: ignore[arg-type]
        t.fill(1, 0, 4)
        t.touch(1, hit=True)
        t.touch(1, hit=True)
        t.fill(2, 0, 4)  # more recent than 1, never matched
        t.fill(3, 0, 4)  # needs 4 blocks: one whole session goes
        victims[policy] = sorted({1, 2} - set(t.runs))
        _check(t)
    assert victims == {"lru": [1], "lfu": [2]}


def test_lfu_ties_fall_back_to_lru() -> None:
    t = DramTier("n", 8, "lfu")
    t.fill(1, 0, 4)
    t.fill(2, 0, 4)
    t.fill(3, 0, 4)
    assert set(t.runs) == {2, 3}


def test_fills_extend_a_leading_run_only_and_never_exceed_capacity() -> None:
    t = DramTier("n", 6, "lru")
    assert t.fill(1, 2, 5) == 0  # a gap: blocks 0-1 are not held, the rest is of no use
    assert t.fill(1, 0, 3) == 3
    assert t.fill(1, 3, 5) == 2  # contiguous: extends
    assert t.fill(1, 0, 4) == 0  # already held
    assert t.fill(1, 0, 100) == 1  # a run longer than the tier keeps its first 6 blocks
    assert t.runs == {1: 6}
    assert t.inserted_blocks == 6 and t.evicted_blocks == 0
    assert DramTier("z", 0).fill(1, 0, 4) == 0


def test_a_long_run_of_touches_keeps_the_heap_small() -> None:
    t = DramTier("n", 100, "lru")
    t.fill(1, 0, 1)
    for _ in range(10_000):
        t.touch(1, hit=True)
    assert len(t._heap) <= 4 * len(t.runs) + 65


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_random_fills_keep_the_accounting(policy: str) -> None:
    """Capacity is never exceeded, `used` is what the runs hold, every eviction is counted:
    inserted - evicted = held, over thousands of random fills and matches."""
    rng = random.Random(7)
    t = DramTier("n", 50, policy)  # type: ignore[arg-type]
    for _ in range(5000):
        s = rng.randrange(20)
        if rng.random() < 0.3:
            t.touch(s, hit=True)
        else:
            have = t.cached(s)
            t.fill(s, rng.randrange(have + 1), have + rng.randrange(1, 30))
        _check(t)
    assert t.inserted_blocks - t.evicted_blocks == t.used
    assert t.evicted_blocks > 0 and t.peak == 50


def test_bad_tier_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"tier\.eviction"):
        DramTier("n", 4, "mru")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0 blocks"):
        DramTier("n", -1)


def test_lookup_local_first_then_the_longest_remote_run() -> None:
    ts = TierSet(["a", "b", "c"], 100, "lru")
    ts.fill("a", 7, 0, 3)
    ts.fill("b", 7, 0, 8)
    ts.fill("c", 7, 0, 5)
    assert ts.lookup(7, "a", 6) == TierRead(local=3, end=6, src="b")  # capped at the hit
    assert ts.lookup(7, "b", 6) == TierRead(6, 6, "")
    assert ts.lookup(8, "a", 6) == TierRead(0, 0, "")
    off = TierSet(["a", "b"], 100, "lru", remote=False)
    off.fill("b", 7, 0, 8)
    assert off.lookup(7, "a", 6) == TierRead(0, 0, "")


def _req(session: int, hit: int = 0) -> Request:
    fut: asyncio.Future[None] = asyncio.new_event_loop().create_future()
    r = Request(rid=session, session=session, turn=1, prompt=6400, gen=10, arrival=0, done=fut)
    r.hit = hit
    return r


def _pes() -> list[EngineState]:
    nodes = [NodeState(f"prefill{n}", "prefill", n) for n in range(2)]
    return [EngineState(f"p{n}.{g}", 2 * n + g, nodes[n], 0, g) for n in range(2) for g in range(2)]


def test_hicache_sends_a_session_back_to_the_node_holding_it() -> None:
    pol = HiCache(LIMITS, 0)
    pol.tier = TierSet(["prefill0", "prefill1"], 100, "lru")
    pol.tier.fill("prefill1", 5, 0, 10)
    engines = _pes()
    engines[3].tok = 50  # the node's least-loaded engine is chosen
    out = pol.assign_prefill(deque([_req(5), _req(6)]), engines)
    assert [(r.session, e.engine_id) for r, e in out] == [(5, "p1.0"), (6, "p0.0")]
    # the holding node's engines are all over β: engines in turn instead
    engines = _pes()
    engines[2].tok = engines[3].tok = LIMITS.beta + 1
    out = pol.assign_prefill(deque([_req(5)]), engines)
    assert out[0][1].node.name == "prefill0"


def test_dualpath_tier_reads_where_the_hit_is_cached() -> None:
    pol = DualPathTier(LIMITS, 0)
    pe, de = NodeState("prefill0", "prefill", 0), NodeState("decode0", "decode", 0)
    assert pol.choose_path(_req(5, hit=640), pe, de) is ReadPath.DE  # tier off: DualPath
    pol.tier = TierSet(["prefill0", "decode0"], 100, "lru", block_tokens=64)
    assert pol.choose_path(_req(5, hit=640), pe, de) is ReadPath.DE  # nothing cached: tie
    pol.tier.fill("prefill0", 5, 0, 10)
    assert pol.choose_path(_req(5, hit=640), pe, de) is ReadPath.PE
    pe.read_q = 700  # a long queue outweighs the 640 cached tokens
    assert pol.choose_path(_req(5, hit=640), pe, de) is ReadPath.DE


def test_the_tier_policies_are_registered() -> None:
    names = default_registry().names()
    assert "hicache" in names and "dualpath+tier" in names
    assert default_registry().get("hicache").dual_path is False


def test_both_runtimes_accept_the_tier() -> None:
    from dualpath.cli.common import validate
    from dualpath.model.config.presets import resolve

    sc = resolve("smoke", {}, ["tier.dram_bytes_per_node=1e9", "policy.name=hicache"])
    validate(sc)
    validate(sc, processes=True)  # the process runtime runs it too (docs/tier.md)
