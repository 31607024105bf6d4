"""Pure VL-arbitration / processor-sharing share functions (no asyncio)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.links.arbitration import (
    VlArbitration,
    allocate,
    equal_waterfill,
    paper_cnic_arbitration,
    saturated_shares,
    weighted_waterfill,
)

PAPER = paper_cnic_arbitration()
# Disjoint-class reading: a VL with a high-table weight is served only by the high table.
PAPER_DISJOINT = VlArbitration(
    high={0: 192, 1: 192, 2: 0, 3: 192},
    low={0: 192, 1: 192, 2: 64, 3: 192},
    high_limit=240,
    high_vls_in_low_table=False,
)
HIGH_FRACTION = 240 * 4096 / (240 * 4096 + 4096)  # 960 KB per 4 KB low packet


def test_opensm_strings_build_the_paper_setting() -> None:
    parsed = VlArbitration.from_opensm("0:192,1:192,2:0,3:192", "0:192,1:192,2:64,3:192", 240)
    assert parsed == PAPER
    assert parsed.high == {0: 192, 1: 192, 3: 192}  # weight 0 = not in the table
    assert math.isclose(PAPER.high_fraction, HIGH_FRACTION)
    assert math.isclose(HIGH_FRACTION, 0.99585, abs_tol=1e-5)


def test_vl0_and_kv_saturated_iba_rule() -> None:
    """docs/links.md VL arbitration: VL0 ~99.9 %, KV 0.1 % (VL0 takes 3 of 4 low-table packets)."""
    shares = saturated_shares(PAPER, [0, 2])
    assert math.isclose(shares[2], (1 - HIGH_FRACTION) * 64 / 256, rel_tol=1e-12)
    assert math.isclose(shares[0], 0.99896, abs_tol=1e-5)
    assert math.isclose(shares[2], 0.00104, abs_tol=1e-5)


def test_vl0_and_kv_saturated_disjoint_classes() -> None:
    """Two-class reading: high class 960/964 = 99.6 %, KV the rest (0.41 %)."""
    shares = saturated_shares(PAPER_DISJOINT, [0, 2])
    assert math.isclose(shares[0], HIGH_FRACTION, rel_tol=1e-12)
    assert math.isclose(shares[2], 1 - HIGH_FRACTION, rel_tol=1e-9)
    assert math.isclose(shares[2], 0.00415, abs_tol=1e-5)


def test_all_four_vls_saturated() -> None:
    """docs/links.md VL arbitration: VL0/1/3 33.3 % each, KV ~0.04 % (64 of 640 low credits)."""
    shares = saturated_shares(PAPER, [0, 1, 2, 3])
    assert math.isclose(shares[2], (1 - HIGH_FRACTION) * 64 / 640, rel_tol=1e-12)
    assert math.isclose(shares[2], 0.000415, abs_tol=1e-6)
    for vl in (0, 1, 3):
        assert math.isclose(shares[vl], (1 - shares[2]) / 3, rel_tol=1e-12)
    assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("arb", [PAPER, PAPER_DISJOINT])
def test_a_lone_class_gets_the_whole_link(arb: VlArbitration) -> None:
    assert saturated_shares(arb, [2]) == {2: 1.0}
    assert math.isclose(saturated_shares(arb, [0])[0], 1.0)
    high_only = saturated_shares(arb, [0, 1, 3])
    assert all(math.isclose(v, 1 / 3) for v in high_only.values())


@pytest.mark.parametrize(
    ("high", "low", "limit", "expected"),
    [  # the closed forms of docs/links.md, VL arbitration
        ({0: 64}, {1: 64, 2: 128}, 6, {0: 0.857, 1: 0.048, 2: 0.095}),
        ({0: 64}, {1: 64, 2: 128}, 0, {0: 0.500, 1: 0.167, 2: 0.333}),
        ({0: 64}, {1: 64, 2: 128}, 255, {0: 1.0, 1: 0.0, 2: 0.0}),
        ({}, {1: 64, 2: 192}, 240, {1: 0.25, 2: 0.75}),
    ],
)
def test_reference_toy_table(
    high: dict[int, int], low: dict[int, int], limit: int, expected: dict[int, float]
) -> None:
    shares = saturated_shares(VlArbitration(high, low, limit), expected)
    for vl, share in expected.items():
        assert math.isclose(shares[vl], share, abs_tol=6e-4), (vl, shares)


def test_isolation_off_shares_per_flow_regardless_of_vl() -> None:
    arb = paper_cnic_arbitration(isolation=False)
    shares = allocate(100.0, arb, [0, 2, 2, 2], [math.inf] * 4)
    assert shares == [25.0, 25.0, 25.0, 25.0]


def test_flows_within_one_vl_share_equally() -> None:
    shares = allocate(100.0, PAPER, [2, 2, 0, 2], [math.inf] * 4)
    kv = [shares[0], shares[1], shares[3]]
    assert max(kv) - min(kv) < 1e-12
    assert math.isclose(sum(shares), 100.0)


def test_high_vl_limited_elsewhere_leaves_the_rest_to_kv() -> None:
    """Work conservation: a VL0 flow that can only use 10 leaves 90 to the KV lane."""
    shares = allocate(100.0, PAPER, [0, 2], [10.0, math.inf])
    assert shares == pytest.approx([10.0, 90.0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"high": {15: 64}, "low": {}}, "not a data VL"),
        ({"high": {0: 256}, "low": {}}, "weight"),
        ({"high": {0: 64}, "low": {}, "high_limit": 256}, "high_limit"),
        ({"high": {}, "low": {2: 0}}, "at least one VL"),
        ({"high": {0: 64}, "low": {}, "mtu_bytes": 0}, "mtu"),
    ],
)
def test_bad_tables_are_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VlArbitration(**kwargs)  # type: ignore[arg-type]


def test_vl_outside_tables_is_not_served() -> None:
    assert not PAPER.serves(5)
    assert PAPER.serves(2)
    assert paper_cnic_arbitration(isolation=False).serves(5)


caps_st = st.one_of(st.just(math.inf), st.floats(0.0, 200.0))


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.floats(1.0, 1e3),
    flows=st.lists(st.tuples(st.sampled_from([0, 1, 2, 3]), caps_st), min_size=1, max_size=12),
    disjoint=st.booleans(),
    isolation=st.booleans(),
)
def test_allocation_is_feasible_and_work_conserving(
    capacity: float, flows: list[tuple[int, float]], disjoint: bool, isolation: bool
) -> None:
    arb = VlArbitration(
        PAPER.high, PAPER.low, 240, isolation=isolation, high_vls_in_low_table=not disjoint
    )
    vls = [vl for vl, _ in flows]
    caps = [cap for _, cap in flows]
    shares = allocate(capacity, arb, vls, caps)
    assert all(s >= 0 for s in shares)
    assert all(s <= c * (1 + 1e-9) + 1e-12 for s, c in zip(shares, caps, strict=True))
    assert sum(shares) <= capacity * (1 + 1e-9)
    demand = math.fsum(caps)
    assert math.isclose(sum(shares), min(capacity, demand), rel_tol=1e-7, abs_tol=1e-9)
    # Flows of one VL that are not limited elsewhere get equal shares.
    for vl in set(vls):
        free = [s for s, v, c in zip(shares, vls, caps, strict=True) if v == vl and c > s * 1.01]
        if free:
            assert max(free) - min(free) <= 1e-9 * capacity


@settings(max_examples=200, deadline=None)
@given(
    budget=st.one_of(st.just(0.0), st.floats(1e-6, 1e3)),
    items=st.lists(st.tuples(st.floats(0.1, 10.0), caps_st), min_size=1, max_size=10),
)
def test_weighted_waterfill_is_max_min_fair(
    budget: float, items: list[tuple[float, float]]
) -> None:
    weights = [w for w, _ in items]
    caps = [c for _, c in items]
    out = weighted_waterfill(budget, weights, caps)
    assert math.isclose(sum(out), min(budget, math.fsum(caps)), rel_tol=1e-7, abs_tol=1e-9)
    # Anyone below its cap is at the common (highest) per-weight level.
    levels = [o / w for o, w in zip(out, weights, strict=True)]
    top = max(levels)
    for o, c, lvl in zip(out, caps, levels, strict=True):
        assert o <= c * (1 + 1e-9) + 1e-12
        if o < c * (1 - 1e-9):
            assert math.isclose(lvl, top, rel_tol=1e-9)
    # Equal shares are unit weights, to the last bit (equal_waterfill's own loop relies on it;
    # a run's report must not depend on which of the two computed a share).
    assert equal_waterfill(budget, caps) == weighted_waterfill(budget, [1.0] * len(caps), caps)
    tight = [c * 0.25 for c in caps]  # some below the equal share: the water-fill itself runs
    assert equal_waterfill(budget, tight) == weighted_waterfill(budget, [1.0] * len(caps), tight)
