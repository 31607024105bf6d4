"""Trace replay on virtual time: the emulator's hits are the trace's content-addressed ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.workload.traces import infinite_cache_hit
from dualpath.runtimes.virtual.sim import make_workload, simulate
from tests.paths import MOONCAKE, WEKA


def _hits(source: str, path: Path, *sets: str) -> tuple[float, float, dict[str, object]]:
    sc = resolve("smoke", {}, [f"workload.source={source}", f"workload.trace={path}", *sets])
    trace_hit = infinite_cache_hit(make_workload(sc)).token_ratio
    report = simulate(sc)
    return trace_hit, float(report["tokens"]["hit_rate"]), report


def test_mooncake_whole_trace_hits_what_the_readme_says() -> None:
    """All 3,993 requests, arrivals spread x20 so every earlier request has persisted (an
    unbounded cache with nothing in flight): README 65.1 % token-weighted."""
    trace_hit, emu_hit, report = _hits("mooncake", MOONCAKE, "workload.time_scale=20")
    assert trace_hit == pytest.approx(0.651, abs=0.001)
    assert emu_hit == pytest.approx(trace_hit, abs=0.01)
    integrity = report["integrity"]
    assert isinstance(integrity, dict)
    assert integrity["blocks_lost"] == integrity["blocks_corrupted"] == 0
    assert integrity["conservation_ok"]


def test_weka_sessions_hit_what_their_hash_ids_say() -> None:
    """Session replay of real Claude Code sessions: the emulator's hit is the trace's plus
    the blocks of each answer, which the next prompt carries (the trace counts them new)."""
    trace_hit, emu_hit, report = _hits(
        "weka", WEKA, "workload.trace_sessions=8", "workload.time_scale=0.01"
    )
    assert 0 <= emu_hit - trace_hit < 0.01, (trace_hit, emu_hit)
    requests = report["requests"]
    assert isinstance(requests, dict) and requests["failed"] == 0


def test_open_loop_replay_sends_at_trace_times_and_misses_what_is_in_flight() -> None:
    """Open loop at the trace's own clock: a request that arrives while the one it shares a
    prefix with is still running cannot hit it, so the hit is below the unbounded figure."""
    sets = ("workload.trace_requests=300", "workload.replay=open-loop")
    trace_hit, emu_hit, report = _hits("mooncake", MOONCAKE, *sets)
    assert emu_hit < trace_hit
    requests = report["requests"]
    assert isinstance(requests, dict) and requests["completed"] == 300


@pytest.mark.slow
def test_weka_whole_trace_hits_what_the_readme_says() -> None:
    """All 710 sessions (48,658 parent requests, ≈1 min, ≈2 GB): README 96.4 % from the ids;
    the emulated store gives that plus the answers' blocks (measured 96.7 %)."""
    trace_hit, emu_hit, report = _hits(
        "weka", WEKA, "workload.time_scale=0.01", "workload.subagents=false"
    )
    assert trace_hit == pytest.approx(0.964, abs=0.001)
    assert 0 <= emu_hit - trace_hit < 0.01, (trace_hit, emu_hit)
    requests = report["requests"]
    assert isinstance(requests, dict) and requests["completed"] == 48658
