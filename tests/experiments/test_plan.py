"""The planner's experiment (experiments/plan.py): the probe rule, the search's stages as a
function of the results (fake verdicts here; tests/cli/test_plan.py runs real probes), the
bounds against a real run's report, and the winner's command line."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from dualpath.experiments.plan import Plan, PlanSpec, next_aps, probe_key, walk
from dualpath.experiments.plan_bounds import rate_bound, sample_work
from dualpath.experiments.plan_outputs import document, sim_command
from dualpath.experiments.plan_search import Measured, Slo
from dualpath.model.config.presets import resolve

pytestmark = pytest.mark.timeout(120)


def _spec(**kw: Any) -> PlanSpec:
    base: dict[str, Any] = dict(
        model="ds-27b", gpu="h800", workload="32k", slo=Slo(4.0, 0.05), gpus_max=8,
        policies=("dualpath", "basic"), preset="smoke", gpus_per_node=2, duration_s=20,
        window_s=5, lookback_s=10, width=2, budget=3, probes=4, sample_agents=8,
    )  # fmt: skip
    return PlanSpec(**{**base, **kw})


def _verdict(met: bool) -> dict[str, Any]:
    return {"online": {"slo_met": met}}


def test_next_aps_climbs_descends_then_bisects_as_online_capacity() -> None:
    spec = _spec(probes=6, tolerance=0.1)
    assert next_aps({}, 2.0, spec) == 1.0  # half the bound first
    assert next_aps({1.0: True}, 2.0, spec) == 2.0  # up 2x, capped at the bound
    assert next_aps({1.0: True, 2.0: True}, 2.0, spec) is None  # passed at the bound
    assert next_aps({1.0: False}, 2.0, spec) == 0.25  # down 4x
    assert next_aps({1.0: False}, 1000.0, spec) is None  # below 1/1000 of the bound: none
    assert (
        next_aps({1.0: True, 2.0: False}, 4.0, spec) == 1.4142
    )  # geometric midpoint, as online-capacity rounds it
    assert next_aps({1.0: True, 1.05: False}, 4.0, spec) is None  # within the tolerance
    full = {0.1 * i: True for i in range(1, 7)}
    assert next_aps(full, 4.0, spec) is None  # at most `probes` probes


def test_stages_start_width_candidates_then_prune_by_the_best_measured() -> None:
    plan = Plan(_spec())
    first = plan.plan(False)
    order = plan.order
    started = [order[0], order[1]]
    assert [s.key for s in first] == [
        probe_key(c, float(f"{plan.bounds[c.key].aps * 0.5:.4g}")) for c in started
    ]
    # The best candidate passes at its bound: no other candidate's bound per GPU is higher,
    # so each is pruned, and the search ends.
    best = order[0]
    bound = plan.bounds[best.key].aps
    results = {s.key: _verdict(True) for s in first}
    results[probe_key(best, float(f"{bound:.4g}"))] = _verdict(True)
    w = walk(plan, results)
    assert w.incumbent is not None and w.incumbent == pytest.approx(bound / best.gpus, rel=1e-3)
    assert not w.starting
    later = [c for c in order if c not in started]
    assert set(w.pruned) == {c.key for c in later}
    assert order[1].key in w.stopped  # started, then its bound fell below the best
    assert plan.more(False, results) == []


def test_budget_and_failed_runs_end_the_search() -> None:
    plan = Plan(_spec(width=3, budget=1))
    first = plan.plan(False)
    assert len(first) == 1  # the budget: one candidate at most
    results = {first[0].key: {"error": "RuntimeError: boom"}}
    w = walk(plan, results)
    assert w.stopped and not w.next_probes and not w.starting
    assert len(w.unrun) + len(w.pruned) == len(plan.candidates) - 1


def test_bounds_stay_above_a_real_run() -> None:
    """The storage bound's bytes are at most what a run reads, and every time is below it."""
    from dualpath.experiments.plan_bounds import built_facts
    from dualpath.runtimes.virtual.sim import simulate

    sc = resolve("smoke", {"workload": {"agents": 4}}, [])
    report = simulate(sc, None)
    work = sample_work(sc, 4)
    facts, pe, de, reads = built_facts(sc, work)
    assert reads == "both"
    read = sum(v["bytes"] for v in report["bounds"]["storage_read"]["by_path"].values())
    assert 0 < work.hit_tokens * pe.kv_bytes_per_token <= read
    assert facts.pe_gpus == facts.de_gpus == 2
    aps, binding = rate_bound(facts, pe, de, work, reads)
    assert binding in {"prefill", "decode", "storage_read"}
    assert 4 / report["jct_s"] <= aps  # the run's own throughput is below the bound


def test_the_winner_command_reproduces_the_probe_scenario() -> None:
    spec = _spec(ep_nodes=(1,), extra_sets=("fidelity.storage_read_efficiency=0.9",))
    plan = Plan(spec)
    c = plan.candidates[0]
    cmd = shlex.split(sim_command(spec, Measured(c, 1.25)))
    assert cmd[:4] == ["dualpath", "sim", "--preset", "smoke"]
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert resolve("smoke", {}, sets) == spec.scenario(c, 1.25)
    sc = spec.scenario(c, 1.25)
    assert (sc.online.aps, sc.topology.prefill_group_nodes) == (1.25, 1)
    assert sc.fidelity.storage_read_efficiency == 0.9


def test_document_counts_and_winner() -> None:
    plan = Plan(_spec(budget=1, width=1))
    first = plan.plan(False)
    results = {first[0].key: _verdict(True)}
    doc = document(plan, results)
    assert doc["counts"]["run"] == 1 and doc["counts"]["probes"] == 1
    assert doc["counts"]["candidates"] == len(plan.candidates)
    assert doc["winner"]["key"] == plan.order[0].key
    top = doc["ranked"][0]
    assert top["aps_per_gpu"] == pytest.approx(doc["winner"]["aps"] / top["gpus"])
    assert top["gpus"] == plan.order[0].gpus


def test_the_slo_floor_finds_the_fastest_turn_among_few_shapes() -> None:
    from dualpath.experiments.plan_bounds import built_facts, least_shapes, slo_floor

    sc = resolve("smoke", {}, [])
    work = sample_work(sc, 8)
    _facts, pe, de, _reads = built_facts(sc, work)
    least = least_shapes(work.shapes)
    assert len(least) < len(work.shapes) / 10
    every = min(pe.prefill_time([s]) for s in work.shapes if s[1] > 0)
    assert min(pe.prefill_time([s]) for s in least) == every
    assert slo_floor(pe, de, work, Slo(4.0, 0.05)) is None
    assert (slo_floor(pe, de, work, Slo(4.0, 1e-6)) or "").startswith("tpot: one decode step")
    assert (slo_floor(pe, de, work, Slo(every / 2, 0.05)) or "").startswith("ttft: the fastest")
