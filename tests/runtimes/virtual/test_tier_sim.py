"""The host-DRAM KV tier on virtual time (docs/tier.md): conservation, nothing lost, hits
from DRAM faster than from storage, and the tier off (the default) changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from dualpath.report.render import markdown_report
from dualpath.runtimes.virtual.sim import simulate
from tests.runtimes.virtual.conftest import small

WALL_FIELDS = ("wall_s", "emulated_per_wall")
SMALL_TIER = "tier.dram_bytes_per_node=2e9"  # ~1,400 blocks a node: evicts at 8 agents


def _strip_wall(report: dict[str, Any]) -> dict[str, Any]:
    out = dict(report)
    out["runtime"] = {k: v for k, v in report["runtime"].items() if k not in WALL_FIELDS}
    return out


@pytest.fixture(scope="module")
def hicache_small_tier() -> dict[str, Any]:
    return simulate(small("policy.name=hicache", SMALL_TIER))


def test_tier_off_is_the_run_without_a_tier(smoke_report: dict[str, Any]) -> None:
    off = simulate(small("tier.dram_bytes_per_node=0", "tier.eviction=lfu"))
    assert "tier" not in off and "tier" not in smoke_report
    off["scenario"]["tier"] = smoke_report["scenario"]["tier"]  # the setting itself differs
    assert _strip_wall(off) == _strip_wall(smoke_report)


@pytest.mark.parametrize("policy", ["hicache", "dualpath+tier"])
def test_tier_runs_conserve_every_byte_and_lose_no_block(policy: str) -> None:
    r = simulate(small(f"policy.name={policy}", SMALL_TIER, "tier.eviction=lfu"))
    integ, tier = r["integrity"], r["tier"]
    assert integ["conservation_ok"] is True
    assert integ["blocks_lost"] == 0 and integ["blocks_corrupted"] == 0
    assert integ["blocks_parked_at_end"] == 0
    assert sum(tier["hit_tokens"].values()) == r["tokens"]["hit"]
    dram = tier["hit_bytes"]["local_dram"] + tier["hit_bytes"]["remote_dram"]
    assert dram > 0 and tier["evicted_blocks"] > 0
    assert integ["bytes_from_storage"] == pytest.approx(tier["hit_bytes"]["storage"], rel=1e-9)
    assert integ["bytes_from_storage"] + dram == pytest.approx(
        integ["bytes_to_prefill_hbm"], rel=1e-9
    )
    # every byte from storage, and none from a tier, crossed a storage NIC
    snic = sum(n["bytes_read"] for n in r["snic"]["per_node"].values())
    assert snic == pytest.approx(integ["bytes_from_storage"], rel=1e-6)


def test_tier_capacity_is_kept_and_evictions_add_up(hicache_small_tier: dict[str, Any]) -> None:
    t = hicache_small_tier["tier"]
    cap = t["dram_bytes_per_node"]
    for node in t["per_node"].values():
        assert node["peak_bytes"] <= cap
        assert node["used_bytes"] <= node["peak_bytes"]
    assert t["evicted_blocks"] == sum(n["evicted_blocks"] for n in t["per_node"].values())
    assert t["hit_tokens"]["hbm"] == 0
    page = markdown_report(hicache_small_tier)
    assert "hit from DRAM local / remote / storage" in page
    assert f"{t['evicted_blocks']} / {t['evicted_sessions']}" in page


def test_a_hit_from_dram_is_read_faster_than_from_storage(
    hicache_small_tier: dict[str, Any],
) -> None:
    """Same policy, same agents: with a tier large enough to hold everything, the hits come
    from DRAM and the read stage of a turn nearly vanishes; without it, they cross the SNIC."""
    big = simulate(small("policy.name=hicache", "tier.dram_bytes_per_node=1.5e12"))
    none = simulate(small("policy.name=hicache"))
    assert big["tier"]["evicted_blocks"] == 0
    assert big["tier"]["hit_share"]["storage"] == 0.0
    read = {k: r["ttft_breakdown"]["stages"]["read"]["mean"] for k, r in
            (("big", big), ("small", hicache_small_tier), ("none", none))}  # fmt: skip
    assert read["big"] < read["small"] < read["none"]
    assert read["big"] < 0.1 * read["none"]
    assert big["integrity"]["bytes_from_storage"] == 0.0


def test_a_runtime_that_replaces_the_read_refuses_the_tier() -> None:
    """A runtime that reads over its own start_read without declaring `reads_tier` (the
    process runtime's `RemoteScheduler` declares it) says so when its scheduler is built
    instead of running without the tier."""
    from dualpath.model.engines.scheduler import GlobalScheduler
    from dualpath.model.entities.request import Request
    from dualpath.runtimes.cluster import build_cluster
    from dualpath.runtimes.virtual.sim import run_virtual_loop

    class ByRpc(GlobalScheduler):
        def start_read(self, req: Request) -> None:
            raise AssertionError("never called")

    async def build(clock: Any) -> None:
        build_cluster(small(SMALL_TIER), clock, 1000, 100, scheduler=ByRpc)

    with pytest.raises(ValueError, match=r"tier.dram_bytes_per_node: this runtime does not read"):
        run_virtual_loop(build)


@pytest.mark.parametrize(
    ("tiered", "plain"), [("dualpath+tier", "dualpath"), ("hicache", "layerwise")]
)
def test_without_a_tier_the_tier_policies_are_their_bases(tiered: str, plain: str) -> None:
    a = simulate(small(f"policy.name={tiered}", agents=4))
    b = simulate(small(f"policy.name={plain}", agents=4))
    for r in (a, b):
        r["policy"].pop("name")
        r["scenario"]["policy"].pop("name")
    assert _strip_wall(a) == _strip_wall(b)
