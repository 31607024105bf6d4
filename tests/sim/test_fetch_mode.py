"""Group leaders poll periodically; skipping the polls where nothing changed is equivalent."""

from __future__ import annotations

import pytest

from dualpath.runtime.sim import simulate
from tests.sim.conftest import small


@pytest.mark.parametrize("policy", ["dualpath", "dualpath-simple"])
def test_periodic_polls_match_on_change_fetches(policy: str) -> None:
    on_change = simulate(small(f"policy.name={policy}"))
    periodic = simulate(small(f"policy.name={policy}", "engine.fetch_mode=periodic"))
    assert periodic["requests"]["completed"] == on_change["requests"]["completed"]
    assert periodic["integrity"]["blocks_read"] == on_change["integrity"]["blocks_read"]
    assert periodic["jct_s"] == pytest.approx(on_change["jct_s"], rel=0.02)
    ttft = (periodic["latency"]["ttft_s"]["mean"], on_change["latency"]["ttft_s"]["mean"])
    # A poll waits up to one interval (5 ms) for a request that on-change fetches at once.
    assert abs(ttft[0] - ttft[1]) <= 0.005 + 0.05 * ttft[1]


def test_several_engine_groups_per_side_share_the_work() -> None:
    """Two DE groups (one node each) and two PE groups: the level-1 DE choice and the PE
    fetches of both groups spread the agents over every node."""
    r = simulate(
        small(
            "topology.prefill_nodes=2",
            "topology.decode_nodes=2",
            "topology.prefill_group_nodes=1",
            "topology.decode_group_nodes=1",
            agents=12,
        )
    )
    per_node = r["snic"]["per_node"]
    persisted = {n: s["bytes_written"] for n, s in per_node.items() if n.startswith("decode")}
    assert len(persisted) == 2 and min(persisted.values()) > 0.25 * max(persisted.values())
    read = {n: s["bytes_read"] for n, s in per_node.items() if n.startswith("prefill")}
    assert len(read) == 2 and min(read.values()) > 0  # both PE groups were given requests
    assert r["integrity"]["conservation_ok"]
