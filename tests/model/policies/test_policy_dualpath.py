"""The DualPath scheduling rules (paper §6.1/§6.2, docs/scheduling.md), one rule or edge per test.

PE choice (α/β categories), DE choice (group load, Z threshold, HBM stop), read path,
compute-quota batching, and the policy registry.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator, Sequence

import pytest

from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import BatchItem, Limits, SchedulingPolicy, quota_batch
from dualpath.model.policies.dualpath import DualPath, Oracle
from dualpath.model.policies.registry import default_registry

ALPHA = 1000
BETA = 1000
KV = 10  # bytes per token
LIMITS = Limits(alpha=ALPHA, beta=BETA, compute_quota_s=0.3, kv_bytes_per_token=KV)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _policy(name: str = "dualpath", limits: Limits = LIMITS) -> SchedulingPolicy:
    return default_registry().create(name, limits, 0)


def _dualpath(limits: Limits = LIMITS) -> DualPath:
    policy = _policy("dualpath", limits)
    assert isinstance(policy, DualPath)
    return policy


def _req(
    loop: asyncio.AbstractEventLoop,
    rid: int,
    prompt: int,
    gen: int = 0,
    hit: int = 0,
    computed: int = 0,
) -> Request:
    return Request(
        rid=rid,
        session=rid,
        turn=0,
        prompt=prompt,
        gen=gen,
        arrival=0.0,
        done=loop.create_future(),
        hit=hit,
        computed=computed,
    )


def _pe(index: int, tok: int = 0, read_q: int = 0, seq: int = 0) -> EngineState:
    """A PE on its own node (read_q is per node)."""
    node = NodeState(f"p{index}", "prefill", index, read_q=read_q)
    return EngineState(f"pe{index}", index, node, 0, 0, seq=seq, tok=tok)


def _de(
    index: int, tok: int = 0, seq: int = 0, free_tokens: float = 1e9, group: int = 0
) -> EngineState:
    """A DE whose free HBM holds `free_tokens` tokens of KV."""
    node = NodeState(f"d{index}", "decode", index)
    return EngineState(
        f"de{index}", index, node, group, index % 8, seq=seq, tok=tok, free_hbm=free_tokens * KV
    )


def _ids(reqs: Sequence[Request]) -> list[int]:
    return [id(r) for r in reqs]


def _picks(out: Sequence[tuple[Request, EngineState]]) -> list[tuple[int, str]]:
    return [(r.rid, e.engine_id) for r, e in out]


# --- PE choice: β (overloaded = tok_e > β) ------------------------------------------------


def test_pe_engine_at_exactly_beta_still_gets_a_request(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_pe(0, tok=BETA)]
    queue = deque([_req(loop, 0, prompt=100)])
    out = _policy().assign_prefill(queue, engines)
    assert _picks(out) == [(0, "pe0")]
    assert not queue


def test_pe_engine_at_beta_plus_one_gets_nothing(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_pe(0, tok=BETA + 1)]
    req = _req(loop, 0, prompt=100)
    queue = deque([req])
    assert _policy().assign_prefill(queue, engines) == []
    assert list(queue) == [req]
    assert (engines[0].tok, engines[0].seq) == (BETA + 1, 0)  # untouched


def test_pe_beta_is_checked_before_the_request_so_a_big_request_may_push_past_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_pe(0, tok=BETA)]
    queue = deque([_req(loop, 0, prompt=5 * BETA), _req(loop, 1, prompt=1)])
    out = _policy().assign_prefill(queue, engines)
    assert _picks(out) == [(0, "pe0")]  # qualifies at tok == β, then overloaded
    assert engines[0].tok == 6 * BETA
    assert [r.rid for r in queue] == [1]


def test_pe_overloaded_short_queue_engine_loses_to_long_queue_engine(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # pe0 would be category 2 (short queue) but is over β: category 3 (pe1) gets the request.
    engines = [_pe(0, tok=BETA + 1, read_q=0), _pe(1, tok=BETA, read_q=ALPHA + 1)]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe1")]


# --- PE choice: α (category 2 before category 3) -------------------------------------------


def test_pe_short_read_queue_beats_smaller_tok_on_long_read_queue(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_pe(0, tok=0, read_q=ALPHA + 1), _pe(1, tok=900, read_q=0)]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe1")]


def test_pe_read_queue_exactly_alpha_counts_as_short(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_pe(0, tok=0, read_q=ALPHA + 1), _pe(1, tok=900, read_q=ALPHA)]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe1")]


def test_pe_falls_back_to_min_tok_long_queue_engine_when_no_short_queue_engine(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [
        _pe(0, tok=500, read_q=ALPHA + 1),
        _pe(1, tok=200, read_q=5 * ALPHA),
        _pe(2, tok=300, read_q=ALPHA + 1),
    ]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe1")]


def test_pe_category_two_stays_preferred_while_it_has_room(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # The short-queue PE takes requests until it is over β; only then does the long-queue
    # PE (tok 0 throughout) get one.
    engines = [_pe(0, tok=0, read_q=ALPHA + 1), _pe(1, tok=0, read_q=0)]
    queue = deque(_req(loop, i, prompt=400) for i in range(5))
    out = _policy().assign_prefill(queue, engines)
    assert _picks(out) == [(0, "pe1"), (1, "pe1"), (2, "pe1"), (3, "pe0"), (4, "pe0")]
    assert engines[1].tok == 1200


def test_pe_min_tok_within_category_two(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_pe(0, tok=700), _pe(1, tok=300), _pe(2, tok=500)]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe1")]


def test_pe_tie_on_tok_goes_to_lowest_engine_index(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_pe(2), _pe(0), _pe(1)]  # list order differs from index order
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "pe0")]


# --- PE choice: state updates within one fetch ----------------------------------------------


def test_pe_tok_is_updated_after_each_assignment_so_requests_spread(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_pe(0, tok=0), _pe(1, tok=250), _pe(2, tok=120)]
    queue = deque(_req(loop, i, prompt=100) for i in range(5))
    out = _policy().assign_prefill(queue, engines)
    # pe0 0->100, pe0 100->200 (pe2 120 < 200), pe2 120->220, pe0 200->300, pe2 220->320
    assert _picks(out) == [(0, "pe0"), (1, "pe0"), (2, "pe2"), (3, "pe0"), (4, "pe2")]
    assert [e.tok for e in engines] == [300, 250, 320]
    assert [e.seq for e in engines] == [3, 0, 2]


def test_pe_request_weight_is_its_whole_prompt(loop: asyncio.AbstractEventLoop) -> None:
    """tok_e = the total tokens of the engine's requests, cached ones included (§6.1)."""
    engines = [_pe(0, tok=10, seq=2)]
    _policy().assign_prefill(deque([_req(loop, 0, prompt=1000, gen=50, hit=800)]), engines)
    assert (engines[0].tok, engines[0].seq) == (1010, 3)


def test_pe_stop_when_all_overloaded_returns_assigned_and_keeps_fifo(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_pe(0), _pe(1, read_q=ALPHA + 1)]
    original = [_req(loop, i, prompt=600) for i in range(7)]
    queue = deque(original)
    out = _policy().assign_prefill(queue, engines)
    # pe0 (short queue) first: 0 -> 600 -> 1200 (over β); then pe1: 0 -> 600 -> 1200.
    assert _picks(out) == [(0, "pe0"), (1, "pe0"), (2, "pe1"), (3, "pe1")]
    assert _ids([r for r, _ in out]) + _ids(queue) == _ids(original)  # nothing lost/duplicated
    assert [r.rid for r in queue] == [4, 5, 6]
    assert all(e.tok > BETA for e in engines)


def test_pe_all_overloaded_from_the_start_assigns_nothing_and_leaves_queue_untouched(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_pe(0, tok=BETA + 1), _pe(1, tok=10 * BETA, read_q=ALPHA + 1)]
    original = [_req(loop, i, prompt=10) for i in range(3)]
    queue = deque(original)
    assert _policy().assign_prefill(queue, engines) == []
    assert _ids(queue) == _ids(original)


def test_pe_no_engines_assigns_nothing(loop: asyncio.AbstractEventLoop) -> None:
    queue = deque([_req(loop, 0, prompt=10)])
    assert _policy().assign_prefill(queue, []) == []
    assert len(queue) == 1


# --- DE choice, level 1: across groups --------------------------------------------------------


def test_de_group_choice_counts_private_queue_backlog(loop: asyncio.AbstractEventLoop) -> None:
    groups = [[_de(0, tok=50), _de(1, tok=50, group=0)], [_de(2, tok=300, group=1)]]
    # group 0: Σtok 100 + backlog 500 = 600 > group 1: 300.
    private = [deque([_req(loop, 90, prompt=400, gen=100)]), deque[Request]()]
    queue = deque([_req(loop, 0, prompt=10)])
    out = _policy().assign_decode_groups(queue, groups, private)
    assert [(r.rid, g) for r, g in out] == [(0, 1)]
    assert [len(p) for p in private] == [1, 0]  # private queues are read-only here


def test_de_group_without_backlog_goes_to_smaller_token_total(
    loop: asyncio.AbstractEventLoop,
) -> None:
    groups = [[_de(0, tok=50), _de(1, tok=50)], [_de(2, tok=300, group=1)]]
    private: list[deque[Request]] = [deque(), deque()]
    out = _policy().assign_decode_groups(deque([_req(loop, 0, prompt=10)]), groups, private)
    assert [g for _, g in out] == [0]


def test_de_group_load_is_updated_during_the_drain(loop: asyncio.AbstractEventLoop) -> None:
    groups = [[_de(0)], [_de(1, group=1)]]
    private: list[deque[Request]] = [deque(), deque()]
    lengths = [100, 100, 50, 300, 10, 120]
    queue = deque(_req(loop, i, prompt=n - 5, gen=5) for i, n in enumerate(lengths))
    out = _policy().assign_decode_groups(queue, groups, private)
    # loads [0,0] -> g0 (tie: lowest) [100,0] -> g1 [100,100] -> g0 [150,100]
    # -> g1 [150,400] -> g0 [160,400] -> g0 [280,400]
    assert [g for _, g in out] == [0, 1, 0, 1, 0, 0]
    assert not queue  # the whole global queue is drained


def test_de_group_load_uses_request_length_prompt_plus_gen(
    loop: asyncio.AbstractEventLoop,
) -> None:
    groups = [[_de(0, tok=0)], [_de(1, tok=150, group=1)]]
    private: list[deque[Request]] = [deque(), deque()]
    # first request: length 100 + 100 = 200 (prompt alone would be 100 < 150)
    queue = deque([_req(loop, 0, prompt=100, gen=100), _req(loop, 1, prompt=1)])
    out = _policy().assign_decode_groups(queue, groups, private)
    assert [g for _, g in out] == [0, 1]


# --- DE choice, level 2: the Z threshold -----------------------------------------------------


def test_high_token_threshold_counts_only_the_prefix_that_fits_total_free_hbm(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_de(0, tok=100, free_tokens=100), _de(1, tok=300, free_tokens=50)]
    # Total free: 150 tokens. Prefix 60 + 80 = 140 fits; +20 = 160 does not. The last
    # request (5) would fit on its own, but R is a prefix: it does not count.
    lengths = [60, 80, 20, 5]
    private = [_req(loop, i, prompt=n) for i, n in enumerate(lengths)]
    z = _dualpath().high_token_threshold(private, engines)
    assert z == pytest.approx(1.05 * (140 + 400) / 2)


def test_high_token_threshold_prefix_that_fills_hbm_exactly_counts(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_de(0, tok=0, free_tokens=100), _de(1, tok=0, free_tokens=50)]
    private = [_req(loop, 0, prompt=100), _req(loop, 1, prompt=50)]
    z = _dualpath().high_token_threshold(private, engines)
    assert z == pytest.approx(1.05 * 150 / 2)


def test_high_token_threshold_uses_z_factor_and_engine_count(
    loop: asyncio.AbstractEventLoop,
) -> None:
    limits = Limits(alpha=1, beta=1, compute_quota_s=0.3, kv_bytes_per_token=KV, z_factor=2.0)
    engines = [_de(0, tok=30), _de(1, tok=60), _de(2, tok=0)]
    private = [_req(loop, 0, prompt=100, gen=20)]
    z = _dualpath(limits).high_token_threshold(private, engines)
    assert z == pytest.approx(2.0 * (120 + 90) / 3)


def test_high_token_threshold_with_nothing_fitting_is_tok_average(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_de(0, tok=100, free_tokens=10), _de(1, tok=200, free_tokens=10)]
    private = [_req(loop, 0, prompt=21), _req(loop, 1, prompt=1)]
    z = _dualpath().high_token_threshold(private, engines)
    assert z == pytest.approx(1.05 * 300 / 2)


def test_de_default_z_factor_is_1_05() -> None:
    assert Limits(alpha=1, beta=1, compute_quota_s=0.3, kv_bytes_per_token=1).z_factor == 1.05


def test_de_smallest_seq_below_z_is_chosen_over_smaller_seq_above_z(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # Z = 1.05 × (100 + 600) / 3 = 245. de2 has the smallest seq but 500 + 100 > Z.
    engines = [_de(0, tok=0, seq=5), _de(1, tok=100, seq=1), _de(2, tok=500, seq=0)]
    policy = _dualpath()
    private = deque([_req(loop, 0, prompt=90, gen=10)])
    assert policy.high_token_threshold(private, engines) == pytest.approx(245.0)
    out = policy.assign_decode(private, engines)
    assert _picks(out) == [(0, "de1")]


def test_de_tok_plus_len_exactly_z_counts_as_below(loop: asyncio.AbstractEventLoop) -> None:
    limits = Limits(alpha=1, beta=1, compute_quota_s=0.3, kv_bytes_per_token=KV, z_factor=2.0)
    # Z = 2 × (100 + 50 + 0) / 2 = 150. de0: 50 + 100 = 150 (exactly Z), de1: 0 + 100.
    # Both are in category (2), so the smaller seq (de0) wins; were "= Z" counted as high,
    # de1 would be the only candidate.
    engines = [_de(0, tok=50, seq=0), _de(1, tok=0, seq=5)]
    private = deque([_req(loop, 0, prompt=100)])
    policy = _dualpath(limits)
    assert policy.high_token_threshold(private, engines) == 150.0
    out = policy.assign_decode(private, engines)
    assert _picks(out) == [(0, "de0")]


def test_de_all_over_z_falls_back_to_smallest_tok(loop: asyncio.AbstractEventLoop) -> None:
    # Z = 1.05 × (1000 + 10) / 2 = 530.25; both DEs are over Z with a 1000-token request.
    engines = [_de(0, tok=10, seq=0), _de(1, tok=0, seq=7)]
    out = _dualpath().assign_decode(deque([_req(loop, 0, prompt=1000)]), engines)
    assert _picks(out) == [(0, "de1")]  # smallest tok, despite the larger seq


def test_de_fallback_tie_on_tok_goes_to_lowest_index(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_de(3, tok=0, seq=0), _de(1, tok=0, seq=4)]
    out = _dualpath().assign_decode(deque([_req(loop, 0, prompt=1000)]), engines)
    assert _picks(out) == [(0, "de1")]


def test_de_seq_tie_below_z_goes_to_lowest_index(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_de(5, tok=0, seq=1), _de(2, tok=0, seq=1), _de(4, tok=0, seq=2)]
    out = _dualpath().assign_decode(deque([_req(loop, 0, prompt=10)]), engines)
    assert _picks(out) == [(0, "de2")]


def test_de_only_engines_with_the_hbm_are_candidates(loop: asyncio.AbstractEventLoop) -> None:
    # de0 is the natural pick (tok 0, seq 0) but cannot hold 100 tokens.
    engines = [_de(0, tok=0, seq=0, free_tokens=99), _de(1, tok=50, seq=3, free_tokens=100)]
    out = _dualpath().assign_decode(deque([_req(loop, 0, prompt=100)]), engines)
    assert _picks(out) == [(0, "de1")]
    assert engines[1].free_hbm == 0.0  # an exact fit is a fit


def test_de_assignment_updates_free_hbm_tok_and_seq(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_de(0, tok=7, seq=2, free_tokens=1000)]
    _dualpath().assign_decode(deque([_req(loop, 0, prompt=90, gen=30)]), engines)
    assert (engines[0].free_hbm, engines[0].tok, engines[0].seq) == ((1000 - 120) * KV, 127, 3)


def test_de_seq_updated_between_assignments_balances_request_counts(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_de(0), _de(1), _de(2)]
    private = deque(_req(loop, i, prompt=10) for i in range(6))
    out = _dualpath().assign_decode(private, engines)
    assert [e.engine_id for _, e in out] == ["de0", "de1", "de2", "de0", "de1", "de2"]


def test_de_head_that_fits_nowhere_stops_the_fetch_even_if_a_later_request_fits(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engines = [_de(0, free_tokens=100), _de(1, free_tokens=150)]
    original = [_req(loop, 0, prompt=151), _req(loop, 1, prompt=10), _req(loop, 2, prompt=5)]
    private = deque(original)
    assert _dualpath().assign_decode(private, engines) == []
    assert _ids(private) == _ids(original)
    assert [e.free_hbm for e in engines] == [1000.0, 1500.0]


def test_de_stop_midway_keeps_the_rest_queued_in_order(loop: asyncio.AbstractEventLoop) -> None:
    engines = [_de(0, free_tokens=100)]
    original = [
        _req(loop, 0, prompt=60),
        _req(loop, 1, prompt=50),  # 60 + 50 > 100: stop here
        _req(loop, 2, prompt=10),
    ]
    private = deque(original)
    out = _dualpath().assign_decode(private, engines)
    assert _picks(out) == [(0, "de0")]
    assert _ids(private) == _ids(original[1:])


def test_de_no_engines_assigns_nothing(loop: asyncio.AbstractEventLoop) -> None:
    private = deque([_req(loop, 0, prompt=10)])
    assert _dualpath().assign_decode(private, []) == []
    assert len(private) == 1


# --- read path -----------------------------------------------------------------------------


def _nodes(pe_q: int, de_q: int) -> tuple[NodeState, NodeState]:
    return NodeState("p", "prefill", 0, read_q=pe_q), NodeState("d", "decode", 0, read_q=de_q)


@pytest.mark.parametrize("name", ["dualpath", "oracle", "dualpath-simple"])
def test_read_path_tie_goes_to_de_side_by_default(
    name: str, loop: asyncio.AbstractEventLoop
) -> None:
    assert _policy(name).choose_path(_req(loop, 0, 10), *_nodes(500, 500)) is ReadPath.DE


@pytest.mark.parametrize("name", ["dualpath", "oracle", "dualpath-simple"])
def test_read_path_de_side_when_de_queue_strictly_shorter(
    name: str, loop: asyncio.AbstractEventLoop
) -> None:
    assert _policy(name).choose_path(_req(loop, 0, 10), *_nodes(500, 499)) is ReadPath.DE


@pytest.mark.parametrize("name", ["dualpath", "oracle", "dualpath-simple"])
def test_read_path_pe_side_when_pe_queue_shorter(
    name: str, loop: asyncio.AbstractEventLoop
) -> None:
    assert _policy(name).choose_path(_req(loop, 0, 10), *_nodes(499, 500)) is ReadPath.PE


@pytest.mark.parametrize("name", ["layerwise", "basic"])
def test_read_path_without_dual_path_is_always_pe(
    name: str, loop: asyncio.AbstractEventLoop
) -> None:
    policy = _policy(name)
    assert policy.dual_path is False
    req = _req(loop, 0, 10)
    for pe_q, de_q in [(500, 0), (500, 500), (0, 500)]:
        assert policy.choose_path(req, *_nodes(pe_q, de_q)) is ReadPath.PE


# --- oracle ----------------------------------------------------------------------------------


def test_oracle_is_dualpath_with_oracle_flag(loop: asyncio.AbstractEventLoop) -> None:
    reg = default_registry()
    assert reg.get("oracle") is Oracle
    assert issubclass(Oracle, DualPath)
    assert Oracle.oracle is True
    assert DualPath.oracle is False
    assert (Oracle.layerwise, Oracle.dual_path) == (DualPath.layerwise, DualPath.dual_path)
    # Same decisions on the same input.
    picks = []
    for name in ("dualpath", "oracle"):
        engines = [_pe(0, tok=300), _pe(1, tok=0, read_q=ALPHA + 1), _pe(2, tok=100)]
        queue = deque(_req(loop, i, prompt=250) for i in range(8))
        picks.append(_picks(_policy(name).assign_prefill(queue, engines)))
    assert picks[0] == picks[1]


# --- intra-engine: compute quota (§6.2) ----------------------------------------------------

QUOTA_UNITS = 300_000  # quota 0.3 s at 1 µs per unit


def _units(batch: Sequence[tuple[int, int]]) -> int:
    """Quadratic attention cost: each new token attends to the cached and earlier new ones."""
    return sum(n * c + n * (n + 1) // 2 for c, n in batch)


def _quadratic(batch: Sequence[tuple[int, int]]) -> float:
    return _units(batch) * 1e-6


def _brute_largest_chunk(
    shapes: list[tuple[int, int]], computed: int, remaining: int, quota_units: int = QUOTA_UNITS
) -> int:
    """The largest new-token count (0 if none) that keeps the batch within the quota."""
    best = 0
    for n in range(remaining + 1):
        if _units([*shapes, (computed, n)]) <= quota_units:
            best = n
    return best


def _items(batch: Sequence[BatchItem]) -> list[tuple[int, int]]:
    return [(i.request.rid, i.new_tokens) for i in batch]


def test_quota_packs_whole_requests_fifo_while_within_quota(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # Each (cached 100, new 200): 200*100 + 200*201/2 = 40_100 units; 7 fit, the 8th is cut.
    ready = deque(_req(loop, i, prompt=300, computed=100) for i in range(10))
    batch = quota_batch(ready, _quadratic, LIMITS, None)
    assert _items(batch)[:7] == [(i, 200) for i in range(7)]
    assert len(batch) == 8
    assert batch[7].request.rid == 7
    assert 0 < batch[7].new_tokens < 200
    assert [r.rid for r in ready] == [7, 8, 9]  # the chunked request stays at the head


@pytest.mark.parametrize("quota_units", [1, 999, 10_050, 40_100, 123_457, 299_999, 300_000])
def test_quota_chunk_is_the_brute_force_largest_chunk_for_quadratic_cost(
    quota_units: int, loop: asyncio.AbstractEventLoop
) -> None:
    scale = 0.3 / quota_units  # LIMITS' 0.3 s quota is `quota_units` cost units

    def cost(batch: Sequence[tuple[int, int]]) -> float:
        return _units(batch) * scale

    first = _req(loop, 0, prompt=150, computed=50)  # whole: 100*50 + 5050 = 10_050 units
    long = _req(loop, 1, prompt=5000, computed=1234)  # whole: far over every quota here
    ready = deque([first, long, _req(loop, 2, prompt=1)])
    batch = quota_batch(ready, cost, LIMITS, None)
    if _units([(50, 100)]) <= quota_units:
        chunk = _brute_largest_chunk([(50, 100)], 1234, 3766, quota_units)
        assert chunk < 3766
        expected = [(0, 100), (1, chunk)] if chunk else [(0, 100)]
        head = long
    else:  # even the first request is chunked (at least one token: progress)
        chunk = _brute_largest_chunk([], 50, 100, quota_units)
        expected = [(0, max(chunk, 1))]
        head = first
    assert _items(batch) == expected
    assert ready[0] is head


def test_quota_batch_closes_after_the_chunk(loop: asyncio.AbstractEventLoop) -> None:
    long = _req(loop, 0, prompt=2000, computed=0)  # 2000*2001/2 = 2_001_000 units: too much
    tiny = _req(loop, 1, prompt=1)  # would fit in what is left, but the batch is closed
    ready = deque([long, tiny])
    batch = quota_batch(ready, _quadratic, LIMITS, None)
    chunk = _brute_largest_chunk([], 0, 2000)
    assert chunk == 774  # 774*775/2 = 299_925 <= 300_000 < 775*776/2
    assert _items(batch) == [(0, chunk)]
    assert list(ready) == [long, tiny]
    assert long.computed == 0  # the policy decides; the engine applies


def test_quota_exactly_at_quota_fits(loop: asyncio.AbstractEventLoop) -> None:
    def linear(batch: Sequence[tuple[int, int]]) -> float:
        return sum(n for _, n in batch) * 1e-3

    ready = deque([_req(loop, 0, prompt=100), _req(loop, 1, prompt=200), _req(loop, 2, 5)])
    batch = quota_batch(ready, linear, LIMITS, None)  # 100 + 200 = 300 ms == quota
    assert _items(batch) == [(0, 100), (1, 200)]
    assert [r.rid for r in ready] == [2]


def test_quota_zero_chunk_is_not_added_to_a_non_empty_batch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    def linear(batch: Sequence[tuple[int, int]]) -> float:
        return sum(n for _, n in batch) * 1e-3

    second = _req(loop, 1, prompt=50)
    ready = deque([_req(loop, 0, prompt=300), second, _req(loop, 2, prompt=1)])
    batch = quota_batch(ready, linear, LIMITS, None)
    assert _items(batch) == [(0, 300)]  # quota used up: no 0-token item for request 1
    assert ready[0] is second


def test_quota_single_token_when_even_one_token_busts_the_quota(
    loop: asyncio.AbstractEventLoop,
) -> None:
    def huge(batch: Sequence[tuple[int, int]]) -> float:
        return 1.0 + sum(n for _, n in batch)  # over the quota for any batch

    head = _req(loop, 0, prompt=10)
    ready = deque([head, _req(loop, 1, prompt=1)])
    assert _items(quota_batch(ready, huge, LIMITS, None)) == [(0, 1)]
    assert ready[0] is head  # 9 tokens left: it stays at the head
    one = _req(loop, 2, prompt=5, computed=4)
    ready = deque([one])
    assert _items(quota_batch(ready, huge, LIMITS, None)) == [(2, 1)]
    assert not ready  # that single token was its last: it leaves the queue


def test_quota_respects_hbm_when_not_layerwise(loop: asyncio.AbstractEventLoop) -> None:
    # HBM for 300 tokens of (cached + new); the quota is not binding.
    ready = deque([_req(loop, 0, prompt=200, computed=100), _req(loop, 1, prompt=400)])
    batch = quota_batch(ready, lambda b: 0.0, LIMITS, hbm_free=300 * KV)
    assert _items(batch) == [(0, 100), (1, 100)]


def test_quota_empty_ready_queue_gives_empty_batch() -> None:
    assert quota_batch(deque(), _quadratic, LIMITS, None) == []


def test_form_batch_is_quota_batch_for_dualpath(loop: asyncio.AbstractEventLoop) -> None:
    a = deque(_req(loop, i, prompt=1000, computed=i * 10) for i in range(5))
    b = deque(a)
    got = _dualpath().form_batch(a, _quadratic, None)
    want = quota_batch(b, _quadratic, LIMITS, None)
    assert [(i.request, i.new_tokens) for i in got] == [(i.request, i.new_tokens) for i in want]


# --- registry --------------------------------------------------------------------------------


def test_registry_has_exactly_the_documented_policy_names() -> None:
    names = default_registry().names()
    assert sorted(names) == sorted(
        [
            "basic",
            "basic-guarded",
            "layerwise",
            "dualpath-simple",
            "dualpath",
            "dualpath-split",
            "oracle",
            "round_robin",
            "random",
            "de-only",
            "hicache",
            "dualpath+tier",
        ]
    )
    assert len(names) == len(set(names)) == 12


def test_registry_feature_flags_follow_the_ablation_ladder() -> None:
    reg = default_registry()
    flags = {
        n: (reg.get(n).layerwise, reg.get(n).dual_path, reg.get(n).oracle) for n in reg.names()
    }
    assert flags["basic"] == (False, False, False)
    assert flags["basic-guarded"] == (False, False, False)
    assert not reg.get("basic").beta_guard and not reg.get("basic").compute_quota
    assert reg.get("basic-guarded").beta_guard and reg.get("basic-guarded").compute_quota
    assert flags["layerwise"] == (True, False, False)
    assert flags["dualpath-simple"] == (True, True, False)
    assert flags["dualpath"] == (True, True, False)
    assert flags["oracle"] == (True, True, True)


def test_pe_tie_on_tokens_goes_to_the_node_with_the_shorter_read_queue(
    loop: asyncio.AbstractEventLoop,
) -> None:
    busy, idle = NodeState("p0", "prefill", 0, read_q=500), NodeState("p1", "prefill", 1)
    engines = [
        EngineState("p0.gpu0", 0, busy, 0, 0),
        EngineState("p1.gpu0", 1, idle, 0, 0),
    ]
    out = _policy().assign_prefill(deque([_req(loop, 0, prompt=100)]), engines)
    assert out[0][1] is engines[1]  # equal tok_e (0): the idle node, not the lower index


def test_path_tie_setting(loop: asyncio.AbstractEventLoop) -> None:
    pe_node, de_node = NodeState("p", "prefill", 0, read_q=7), NodeState("d", "decode", 0, read_q=7)
    req = _req(loop, 0, prompt=100)
    pe_tie = Limits(alpha=1000, beta=1000, compute_quota_s=0.3, kv_bytes_per_token=10,
                    path_tie=ReadPath.PE)  # fmt: skip
    assert DualPath(pe_tie, 0).choose_path(req, pe_node, de_node) is ReadPath.PE
    assert _policy().choose_path(req, pe_node, de_node) is ReadPath.DE
