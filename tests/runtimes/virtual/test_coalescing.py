"""Coalescing layers (and decode steps) into one emulated event must not change results:
coarser settings stay within 2% of the finest (per-layer, per-step) emulation."""

from __future__ import annotations

import pytest

from dualpath.runtimes.virtual.sim import simulate
from tests.runtimes.virtual.conftest import small


@pytest.fixture(scope="module")
def finest() -> dict[str, float]:
    r = simulate(small("engine.layer_group=1", "engine.decode_chunk_steps=1", agents=6))
    return {"jct": r["jct_s"], "ttft": r["latency"]["ttft_s"]["mean"]}


@pytest.mark.parametrize(
    "sets",
    [
        ("engine.layer_group=8",),
        ("engine.layer_group=15",),
        ("engine.decode_chunk_steps=16",),
        ("engine.layer_group=8", "engine.decode_chunk_steps=16"),
    ],
)
def test_coarser_events_change_results_by_under_2_percent(
    finest: dict[str, float], sets: tuple[str, ...]
) -> None:
    r = simulate(small(*sets, agents=6))
    assert r["jct_s"] == pytest.approx(finest["jct"], rel=0.02)
    assert r["latency"]["ttft_s"]["mean"] == pytest.approx(finest["ttft"], rel=0.02)
