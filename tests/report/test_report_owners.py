"""The last-agent lookup finds each record's script as a dict over every (chain, turn) did,
with chains of one script, a few, and many (a trace's shared prefix)."""

from __future__ import annotations

import random

from dualpath.model.entities.metrics import RequestRecord
from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload
from dualpath.report.floor import _FEW, _Owners


def _workload(rng: random.Random) -> Workload:
    scripts = []
    for k in range(60):
        # chain 0 is shared by many scripts, 50 + k // 3 by up to three, 100 + k by one
        chains = [rng.choice([0, 50 + k // 3, 100 + k]) for _ in range(rng.randint(1, 8))]
        turns = tuple(ScriptTurn(10 + i, 1, 0.0, 0.0, c, 1) for i, c in enumerate(chains))
        scripts.append(AgentScript(f"s{k}", 0.0, turns))
    return Workload("test", tuple(scripts), (), 0, "test")


def test_owners_match_a_dict_over_every_chain_and_turn() -> None:
    rng = random.Random(7)
    wl = _workload(rng)
    reference = {(t.chain, i): s for s in wl.scripts for i, t in enumerate(s.turns)}
    owners = _Owners(wl)
    assert len(owners._many) >= 1 and any(len(v) > 1 for v in owners._few.values())
    assert all(len(v) <= _FEW for v in owners._few.values())
    for chain in [0, *range(50, 70), *range(100, 160), 999]:
        for turn in range(-1, 10):
            r = RequestRecord(chain, turn, 10, 0, 1, "pe", 0.0, 0.0, 0.0, 0.0)
            assert owners.of(r.session, r.turn) is reference.get((chain, turn)), (chain, turn)
