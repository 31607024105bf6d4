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
