"""The last-agent lookup finds each record's script as a dict over every (chain, turn) did,
with chains of one script, a few, and many (a trace's shared prefix); the last agent is the
one the per-row algorithm picked, ties included."""

from __future__ import annotations

import random

from dualpath.model.entities.metrics import RequestLog, RequestRecord
from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload
from dualpath.report.floor import _FEW, AgentFloor, _last_agent, _Owners


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


def _reference_last(wl: Workload, records: list[RequestRecord]) -> tuple[str, int, float, float]:
    """The per-row algorithm the report used: each script's latest token in a dict filled in
    row order, max() over it, then the script's rows."""
    owners = _Owners(wl)
    last: dict[str, float] = {}
    for r in records:
        s = owners.of(r.session, r.turn)
        if s is not None:
            t = last.get(s.key)
            if t is None or r.t_last > t:
                last[s.key] = r.t_last
    key = max(last, key=last.__getitem__)
    mine = [r for r in records if (s := owners.of(r.session, r.turn)) and s.key == key]
    ttft = sum(r.t_first - r.arrival for r in mine)
    decode = sum(r.t_last - r.t_first for r in mine)
    return key, len(mine), ttft, decode


def test_last_agent_is_the_per_row_choice_ties_and_rows_without_a_script_included() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        wl = _workload(rng)
        records = []
        for _ in range(300):
            chain = rng.choice([0, *range(50, 70), *range(100, 160), 999])
            arrival = rng.uniform(0.0, 10.0)
            first = arrival + rng.uniform(0.0, 1.0)
            # few distinct last tokens: many scripts tie at the latest one
            t_last = rng.choice([20.0, 30.0, 40.0]) if rng.random() < 0.9 else 50.0
            records.append(
                RequestRecord(
                    chain, rng.randrange(-1, 9), 10, 0, 1, "pe", arrival, first, first, t_last
                )
            )
        floors = [AgentFloor(s.key, len(s.turns), 0.0, 1.0, 0.0, 1.0) for s in wl.scripts]
        got = _last_agent(wl, RequestLog(records), floors)
        assert got is not None
        key, turns, ttft, decode = _reference_last(wl, records)
        assert (got["agent"], got["turns"], got["ttft_s"], got["decode_s"]) == (
            key,
            turns,
            ttft,
            decode,
        ), seed
        assert _last_agent(wl, records, floors) == got  # any collection of records
