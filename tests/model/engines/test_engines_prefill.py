"""model/engines/prefill.py on virtual time: every turn is released (its first token sampled) once
all of its prompt has KV, and handed to its DE only after that; each turn's hit KV goes
into PE HBM exactly once, on its first chunk; Basic (not layerwise) takes the same turns
to completion."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.engines.cluster import Cluster
from dualpath.model.entities.request import Request
from dualpath.runtimes.virtual.sim import run_offline

Hook = Callable[[Request], None]


def _run(policy: str) -> tuple[list[tuple[str, int, float, float]], dict[str, Any]]:
    """Smoke with 4 agents; what each prefill unit reports: (event, rid, computed / prompt,
    t_first == now), and the run's integrity counters."""
    sc = resolve("smoke", {"workload": {"agents": 4}}, [f"policy.name={policy}"])
    seen: list[tuple[str, int, float, float]] = []
    hits: list[int] = []

    def setup(cluster: Cluster) -> None:
        clock = cluster.clock

        def recording(kind: str, hook: Hook) -> Hook:
            def record(req: Request) -> None:
                seen.append((kind, req.rid, req.computed / req.prompt, req.t_first - clock.now()))
                if kind == "released":
                    hits.append(req.hit)
                hook(req)

            return record

        for unit in cluster.prefill_units:
            unit._on_released = recording("released", unit._on_released)
            unit._on_prefilled = recording("prefilled", unit._on_prefilled)

    outcome = run_offline(sc, setup=setup)
    ctx = outcome.cluster.scheduler.ctx
    integrity = dataclasses.asdict(ctx.metrics.integrity)
    hit_bytes = sum(hits) * ctx.kv_token_layer * sum(ctx.layer_groups)
    return seen, {
        **integrity,
        "hit_bytes": hit_bytes,
        "forwards": ctx.metrics.forwards,
        "turns": sum(len(s.turns) for s in outcome.workload.scripts),
    }


@pytest.mark.parametrize("policy", ["dualpath", "basic"])
def test_a_turn_is_released_with_its_whole_prompt_and_handed_over_after(policy: str) -> None:
    seen, run = _run(policy)
    released = [rid for kind, rid, _, _ in seen if kind == "released"]
    prefilled = [rid for kind, rid, _, _ in seen if kind == "prefilled"]
    assert len(released) == len(set(released)) == run["turns"]  # once each
    assert sorted(prefilled) == sorted(released)
    order = {(kind, rid): i for i, (kind, rid, _, _) in enumerate(seen)}
    assert all(order["released", rid] < order["prefilled", rid] for rid in released)
    for kind, rid, done, first_at in seen:
        assert done >= 1.0, (kind, rid, done)  # every prompt token has KV
        if kind == "released":
            assert first_at == 0.0, rid  # the first token is sampled at the release
    assert 0 < run["forwards"] <= run["turns"] * 4  # batched and chunked, not per token


def test_each_turns_hit_kv_is_loaded_into_pe_hbm_once() -> None:
    _, run = _run("dualpath")
    assert run["hit_bytes"] > 0  # the agents' later turns hit their earlier context
    assert run["bytes_to_prefill_hbm"] == pytest.approx(run["hit_bytes"], rel=1e-12)


def _handovers(handover: str) -> list[list[tuple[str, float]]]:
    """Smoke with 16 agents: for each forward's end (prefill unit, t_first), the turns it
    released as (their PE -> DE pair, when each was handed to its DE)."""
    sc = resolve("smoke", {"workload": {"agents": 16}}, [f"fidelity.handover={handover}"])
    out: dict[tuple[int, float], list[tuple[str, float]]] = {}

    def setup(cluster: Cluster) -> None:
        clock = cluster.clock
        for i, unit in enumerate(cluster.prefill_units):
            hook = unit._on_prefilled

            def record(req: Request, i: int = i, hook: Hook = hook) -> None:
                assert req.de is not None and req.pe is not None
                assert clock.now() >= req.t_first
                pair = f"{req.pe.engine_id}->{req.de.engine_id}"
                out.setdefault((i, req.t_first), []).append((pair, clock.now()))
                hook(req)

            unit._on_prefilled = record

    run_offline(sc, setup=setup)
    return list(out.values())


def test_a_turn_is_handed_over_when_its_own_kv_has_landed() -> None:
    """`per-destination` (the default): the turns of one forward reach their DEs as the KV
    flows from their PE GPU to their DE GPU land, so a turn with less KV on its way goes
    first; `per-forward`: all of them once the forward's last flow has landed."""
    whole = _handovers("per-forward")
    assert any(len(turns) > 1 for turns in whole)  # forwards that end several turns
    for turns in whole:
        assert len({t for _, t in turns}) == 1
    forwards = _handovers("per-destination")
    parted = 0
    for turns in forwards:
        by_pair: dict[str, set[float]] = {}
        for pair, t in turns:
            by_pair.setdefault(pair, set()).add(t)
        assert all(len(ts) == 1 for ts in by_pair.values())  # one flow's turns go together
        parted += len({t for _, t in turns}) > 1
    assert parted > 0, len(forwards)  # some forward hands its turns over at different times
