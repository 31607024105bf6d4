"""The capacity planner's pure search (experiments/plan_search.py): the --slo flag, the
candidates, the pruning rule, the ranking and the Pareto front."""

from __future__ import annotations

import math

import pytest

from dualpath.experiments.plan_search import (
    Bound,
    Candidate,
    Measured,
    Slo,
    by_bound,
    enumerate_candidates,
    pareto,
    parse_slo,
    prunable,
    rank,
    smallest_gpus,
)


def test_parse_slo_reads_both_keys_in_any_order() -> None:
    assert parse_slo("ttft=4,tpot=0.05") == Slo(4.0, 0.05)
    assert parse_slo(" TPOT=0.03 , ttft=2.5") == Slo(2.5, 0.03)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("ttft=4", "tpot missing"),
        ("", "is not ttft=SECONDS"),
        ("ttft=4,tpot=0.05,itl=1", "'itl=1' is not"),
        ("ttft=4;tpot=0.05", "must be seconds > 0"),
        ("ttft=x,tpot=0.05", "ttft='x' must be seconds > 0"),
        ("ttft=-1,tpot=0.05", "must be seconds > 0"),
        ("ttft=inf,tpot=0.05", "must be seconds > 0"),
        ("ttft=4,ttft=3,tpot=1", "ttft given twice"),
    ],
)
def test_parse_slo_names_the_flag_and_the_fix(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match="--slo") as err:
        parse_slo(text)
    assert needle in str(err.value) and "use --slo ttft=4,tpot=0.05" in str(err.value)


def test_enumeration_covers_every_split_within_the_gpus() -> None:
    got = enumerate_candidates(24, 8, ["dualpath"])
    assert sorted(c.topo for c in got) == ["1P1D", "1P2D", "2P1D"]
    assert all(c.gpus <= 24 for c in got)
    assert len(enumerate_candidates(48 * 8, 8, ["dualpath"])) == sum(n - 1 for n in range(2, 49))
    assert enumerate_candidates(15, 8, ["dualpath"]) == []
    assert smallest_gpus(8) == 16


def test_enumeration_ep_groups_divide_both_sides_and_tiers_go_to_tier_policies() -> None:
    got = enumerate_candidates(6 * 2, 2, ["basic", "hicache"], ep_nodes=(0, 2),
                               dram_bytes=(0.0, 1.5e12))  # fmt: skip
    for c in got:
        assert c.ep_nodes == 0 or (c.prefill % c.ep_nodes == 0 and c.decode % c.ep_nodes == 0)
        assert (c.dram_bytes > 0) == (c.policy == "hicache")
    assert Candidate("basic", 2, 2, 2, 2, 0.0) in got
    assert Candidate("basic", 1, 2, 2, 2, 0.0) not in got
    assert len({c.key for c in got}) == len(got)  # keys are unique


def test_pruning_skips_only_what_cannot_beat_the_best() -> None:
    c = Candidate("dualpath", 1, 1, 8)  # 16 GPUs
    assert prunable(Bound(1.6, "storage_read"), c, None) is None  # nothing measured yet
    assert prunable(Bound(1.6, "storage_read"), c, 0.09) is None  # 0.1 per GPU > 0.09
    assert "bound 0.1 APS/GPU <= best 0.1" in (prunable(Bound(1.6, "x"), c, 0.1) or "")
    assert prunable(Bound(1.6, "x"), c, 0.2) is not None
    assert prunable(Bound(0.0, "tpot: too slow", feasible=False), c, None) == "slo: tpot: too slow"


def test_by_bound_orders_best_per_gpu_first_then_fewer_gpus() -> None:
    small, big, worse = Candidate("d", 1, 1, 8), Candidate("d", 2, 2, 8), Candidate("d", 1, 2, 8)
    bounds = {small.key: Bound(1.0, "x"), big.key: Bound(2.0, "x"), worse.key: Bound(1.0, "x")}
    assert by_bound([worse, big, small], bounds) == [small, big, worse]
    inf = {**bounds, worse.key: Bound(math.inf, "none")}
    assert by_bound([small, worse], inf)[0] == worse


def test_rank_by_aps_per_gpu_and_pareto_front() -> None:
    a = Measured(Candidate("d", 1, 1, 8), 0.8)  # 16 GPUs, 0.05 per GPU
    b = Measured(Candidate("d", 2, 1, 8), 1.5)  # 24 GPUs, 0.0625
    c = Measured(Candidate("d", 1, 2, 8), 0.9)  # 24 GPUs, dominated by b
    d = Measured(Candidate("d", 3, 1, 8), None)  # no capacity: last
    e = Measured(Candidate("d", 2, 2, 8), 1.4)  # 32 GPUs, less APS than b: dominated
    assert rank([a, b, c, d, e]) == [b, a, e, c, d]
    assert pareto([a, b, c, d, e]) == [a, b]
    assert pareto([d]) == []
