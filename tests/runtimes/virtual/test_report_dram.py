"""Report sections used by the bottleneck-free-range experiment: per-node DRAM utilisation
and the busiest single CNIC direction (overall and per virtual lane)."""

from __future__ import annotations

from typing import Any

import pytest


def test_dram_section(smoke_report: dict[str, Any]) -> None:
    dram = smoke_report["dram"]
    assert set(dram["per_node"]) == set(smoke_report["snic"]["per_node"])
    utils = [n["util"] for n in dram["per_node"].values()]
    assert all(0.0 < u <= 1.0 for u in utils)
    assert dram["max_util"] == max(utils)
    # every byte read from storage crosses the reading node's DRAM (half-duplex link)
    total = sum(n["bytes"] for n in dram["per_node"].values())
    assert total >= smoke_report["integrity"]["bytes_from_storage"]
    jct, rate = smoke_report["jct_s"], smoke_report["scenario"]["hardware"]["dram_gbs"] * 1e9
    for node in dram["per_node"].values():
        assert node["util"] == pytest.approx(node["bytes"] / (rate * jct))


def test_cnic_busiest_direction(smoke_report: dict[str, Any]) -> None:
    cnic = smoke_report["cnic"]
    assert set(cnic["max_util_by_vl"]) == set(cnic["util_by_vl"])
    assert 0.0 < cnic["max_util"] <= 1.0
    for vl, mean_util in cnic["util_by_vl"].items():
        # the busiest direction is at least the mean over all directions, at most the total
        assert mean_util <= cnic["max_util_by_vl"][vl] + 1e-12
        assert cnic["max_util_by_vl"][vl] <= cnic["max_util"] + 1e-12
