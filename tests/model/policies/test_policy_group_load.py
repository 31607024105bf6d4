"""A group's kept Σ tok_e (`GroupLoad`) equals the sum over its engines at every choice that
reads it: the DE-group choice, the DE threshold and the PE groups' order, through a whole
run with several groups a side (the reports rest on it: a stale total picks another group)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import dualpath.model.policies.dualpath as dualpath_policy
from dualpath.model.config.presets import resolve
from dualpath.model.engines.fetches import GroupFetches
from dualpath.model.entities.request import EngineState
from dualpath.runtimes.virtual.sim import simulate


@pytest.mark.parametrize("policy", ["dualpath", "basic"])
def test_kept_group_totals_equal_the_engines_sums_at_every_choice(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = {"tok": 0, "order": 0}
    tok = dualpath_policy._tok

    def checked_tok(engines: Sequence[EngineState]) -> int:
        got = tok(engines)
        assert got == sum(e.tok for e in engines)
        if engines and engines[0].load is not None and len(engines) == engines[0].load.size:
            kept["tok"] += 1
        return got

    order = GroupFetches.pe_order

    def checked_order(self: GroupFetches) -> list[int] | range:
        for group in self._pe_groups:
            load = group[0].load
            assert load is not None and load.tok == sum(e.tok for e in group)
        kept["order"] += 1
        return order(self)

    monkeypatch.setattr(dualpath_policy, "_tok", checked_tok)
    monkeypatch.setattr(GroupFetches, "pe_order", checked_order)
    sets = [
        f"policy.name={policy}",
        "topology.prefill_nodes=4",
        "topology.decode_nodes=8",
        "topology.prefill_group_nodes=2",
        "topology.decode_group_nodes=4",
    ]
    report = simulate(resolve("paper-ds660b-2p4d", {"seed": 1, "workload": {"agents": 24}}, sets))
    assert report["requests"]["completed"] > 100
    assert kept["order"] > 100
    if policy == "dualpath":  # (Basic picks groups its own way, without Σ tok_e)
        assert kept["tok"] > 100
