"""Online serving on virtual time: Poisson arrivals, the stop rule, a clean drain."""

from __future__ import annotations

from typing import Any

import pytest

from dualpath.model.config.settings import Scenario
from dualpath.runtimes.virtual.sim import simulate
from tests.runtimes.virtual.conftest import small

SHORT = ("workload.mode=online", "online.window_s=30", "online.lookback_s=60")


def _online(*sets: str) -> Scenario:
    return small(*SHORT, *sets)


@pytest.fixture(scope="module")
def light() -> dict[str, Any]:
    return simulate(_online("online.aps=0.1", "online.max_duration_s=300"))


def test_light_load_meets_the_slo_and_drains_cleanly(light: dict[str, Any]) -> None:
    o = light["online"]
    assert o["stop_reason"] in {"steady_state", "max_duration"}
    assert o["slo_met"] is True
    assert 0 < o["stop_time_s"] <= 300
    assert o["agents_arrived"] == o["agents_finished"] > 0  # every agent stopped cleanly
    assert o["window"]["ttft_s"]["n"] > 0
    assert o["window"]["ttft_s"]["mean"] <= 4.0
    integ = light["integrity"]
    assert integ["conservation_ok"] and integ["blocks_lost"] == integ["blocks_corrupted"] == 0
    assert light["requests"]["failed"] == 0
    assert light["mode"] == "online"


def test_arrivals_follow_the_rate(light: dict[str, Any]) -> None:
    o = light["online"]
    expected = 0.1 * o["stop_time_s"]  # Poisson: mean arrivals = APS x time
    assert abs(o["agents_arrived"] - expected) <= 4 * expected**0.5 + 1


def test_ttft_over_the_slo_stops_the_run() -> None:
    r = simulate(_online("online.aps=0.5", "online.slo_ttft_s=0.01", "online.max_duration_s=300"))
    o = r["online"]
    assert o["stop_reason"] == "ttft_slo_exceeded"
    assert o["slo_met"] is False
    assert o["stop_time_s"] == pytest.approx(30.0)  # the first full window already fails
    assert r["integrity"]["conservation_ok"]


def test_tpot_over_the_slo_fails_the_verdict() -> None:
    r = simulate(_online("online.aps=0.2", "online.slo_tpot_ms=1", "online.max_duration_s=90"))
    assert r["online"]["window"]["tpot_s"]["mean"] > 0.001
    assert r["online"]["slo_met"] is False


def test_same_seed_same_online_result() -> None:
    sc = _online("online.aps=0.2", "online.max_duration_s=90")
    a, b = simulate(sc)["online"], simulate(sc)["online"]
    assert a == b


def test_more_load_more_ttft() -> None:
    lo = simulate(_online("online.aps=0.05", "online.max_duration_s=120"))["online"]
    hi = simulate(_online("online.aps=1.5", "online.max_duration_s=120"))["online"]
    assert hi["agents_arrived"] > 5 * lo["agents_arrived"]
    assert hi["window"]["ttft_s"]["mean"] > lo["window"]["ttft_s"]["mean"]


def test_trajectory_jct_is_arrival_to_last_token_of_completed_agents() -> None:
    """Fig. 11's metric, checked against the request records: an agent counts once every
    turn of its script ran, and its JCT is its first turn's arrival -> its last token."""
    from dualpath.runtimes.virtual.online import run_online

    sc = _online("online.aps=0.2", "online.max_duration_s=240")
    out = run_online(sc)
    turns = {s.turns[0].chain: len(s.turns) for s in out.workload.scripts}
    by_session: dict[int, list[Any]] = {}
    for r in out.cluster.metrics.requests:
        by_session.setdefault(r.session, []).append(r)
    expected = sorted(
        max(r.t_last for r in rs) - min(r.arrival for r in rs)
        for chain, rs in by_session.items()
        if len(rs) == turns[chain]
    )
    o = out.online
    assert o is not None
    assert 0 < o["trajectories_completed"] == len(expected) < o["agents_arrived"]
    j = o["trajectory_jct_s"]
    assert j["n"] == len(expected)
    assert j["mean"] == pytest.approx(sum(expected) / len(expected), rel=1e-9)
    assert j["min"] == pytest.approx(expected[0]) and j["max"] == pytest.approx(expected[-1])


def test_trajectory_jct_from_turns_is_turns_times_the_window_turn() -> None:
    """The rebuilt Fig. 11 metric, checked against the workload and the request records:
    the arrived agents' mean turns × the last window's mean turn time (no think time)."""
    from dualpath.runtimes.virtual.online import run_online

    sc = _online("online.aps=0.2", "online.max_duration_s=240")
    out = run_online(sc)
    o = out.online
    assert o is not None
    arrived = out.workload.scripts[: o["agents_arrived"]]
    turns = sum(len(s.turns) for s in arrived) / len(arrived)
    assert o["turns_per_trajectory"] == pytest.approx(turns)
    window = [
        r.t_last - r.arrival
        for r in out.cluster.metrics.requests
        if o["stop_time_s"] - o["window_s"] <= r.t_last < o["stop_time_s"]
    ]
    assert o["window"]["turn_s"]["n"] == len(window) > 0
    turn_mean = sum(window) / len(window)
    assert o["trajectory_jct_from_turns_s"] == pytest.approx(turns * turn_mean, rel=1e-9)
