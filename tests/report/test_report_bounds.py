"""Lower bounds on the JCT (report/bounds.py): hand-computed small cases on a linear compute
model, and one real `dualpath sim` run whose every bound must lie below its JCT."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.entities.metrics import RequestRecord
from dualpath.report.bounds import (
    ClusterFacts,
    Traffic,
    bounds_section,
    cnic_bound,
    decode_bound,
    paper_shares,
    prefill_bound,
    storage_bound,
    ttft_stages,
)
from dualpath.report.render import markdown_report
from dualpath.report.render_bounds import bounds_lines
from dualpath.runtimes.virtual.sim import simulate


class Linear:
    """Prefill: 1 ms of attention per new token, a forward 0.1 s + 1 ms per new token on top.
    Decode: a step 10 ms + 1 ms per request + 1 µs per attended key, top-k `topk`."""

    kv_bytes_per_token = 100

    def __init__(self, topk: int = 1 << 40) -> None:
        self.topk = topk

    def prefill_attention_time(self, batch: Sequence[tuple[int, int]]) -> float:
        return 1e-3 * sum(n for _, n in batch)

    def prefill_time(self, batch: Sequence[tuple[int, int]]) -> float:
        n = sum(new for _, new in batch)
        return self.prefill_attention_time(batch) + 0.1 + 1e-3 * n

    def decode_step_time(self, batch_size: int, sum_context: int, sum_attended: int) -> float:
        return 0.01 + 1e-3 * batch_size + 1e-6 * sum_attended if batch_size > 0 else 0.0

    def attended(self, ctx: int) -> int:
        return min(ctx, self.topk)


FACTS = ClusterFacts(
    pe_gpus=2,
    de_gpus=1,
    pe_nodes=2,
    de_nodes=4,
    kv_hbm_pe=375_000.0,  # 2.5 requests of the mean prompt (1,500 tokens x 100 B)
    kv_hbm_de=13_000.0,  # 10 requests of 13 tokens
    snic_read_bytes_s=10e9,
    cnic_bytes_s=1e9,
    layerwise=False,
    compute_quota_s=0.3,  # 3 requests of 0.1 s attention
    max_running_pe=None,
    max_running_de=None,
    sessions=4,
)
SHAPES = [(900, 100), (1900, 100)]  # mean hit 1,400, mean new 100


def test_prefill_takes_the_smallest_batch_limit() -> None:
    # sessions: ceil(4 / 2) = 2 requests = 200 tokens: (0.1 + 0.2) / 200 = 1.5 ms per token
    b = prefill_bound(Linear(), FACTS, SHAPES)
    assert (b["batch_requests"], b["batch_tokens"], b["batch_limit"]) == (2, 200, "sessions")
    assert b["attention_s"] == pytest.approx(0.2)
    assert b["per_token_s"] == pytest.approx(1.5e-3)
    assert b["s"] == pytest.approx((0.2 + 200 * 1.5e-3) / 2)


def test_prefill_hbm_quota_and_cap() -> None:
    many = dataclasses.replace(FACTS, sessions=100)  # HBM 2.5 < quota 3 < sessions 50
    assert prefill_bound(Linear(), many, SHAPES)["batch_limit"] == "hbm"
    layerwise = dataclasses.replace(many, layerwise=True)  # no HBM limit: the quota's 3
    b = prefill_bound(Linear(), layerwise, SHAPES)
    assert (b["batch_limit"], b["batch_requests"], b["batch_tokens"]) == ("quota", 3, 200)
    capped = dataclasses.replace(many, max_running_pe=1)  # one request: 0.1 + 0.1 per 100
    b = prefill_bound(Linear(), capped, SHAPES)
    assert (b["batch_limit"], b["per_token_s"]) == ("cap", pytest.approx(2e-3))
    assert b["s"] == pytest.approx((0.2 + 200 * 2e-3) / 2)


def test_decode_counts_all_tokens_but_the_first_at_their_context() -> None:
    prompt, gen = np.array([10, 20]), np.array([3, 1])  # 2 steps at 10 and 11; none
    b = decode_bound(Linear(), FACTS, prompt, gen)
    assert b["tokens"] == 2
    assert b["attention_s"] == pytest.approx(21e-6)
    # HBM: 13,000 / (13 tokens x 100 B) = 10 requests; sessions: 4 on one DE GPU
    assert (b["batch"], b["batch_limit"]) == (4, "sessions")
    assert b["per_token_s"] == pytest.approx((0.01 + 4e-3) / 4)
    assert b["s"] == pytest.approx(21e-6 + 2 * (0.01 + 4e-3) / 4)
    topk = decode_bound(Linear(topk=10), FACTS, prompt, gen)  # DSA: 10 + 10 keys attended
    assert topk["attention_s"] == pytest.approx(20e-6)
    hbm = decode_bound(Linear(), dataclasses.replace(FACTS, kv_hbm_de=3_000.0), prompt, gen)
    assert (hbm["batch"], hbm["batch_limit"]) == (2, "hbm")


def test_storage_per_path_and_pooled_and_cnic() -> None:
    t = Traffic({"pe": 100e9, "de": 300e9}, cnic_bytes=12e9)
    s = storage_bound(FACTS, t)
    assert s["by_path"]["pe"]["s"] == pytest.approx(5.0)  # 100 GB over 2 SNICs of 10 GB/s
    assert s["by_path"]["de"]["s"] == pytest.approx(7.5)  # 300 GB over 4
    assert s["s"] == pytest.approx(7.5)
    assert s["pooled_s"] == pytest.approx(400 / 60)
    assert cnic_bound(FACTS, t)["s"] == pytest.approx(12e9 / (2 * 3 * 1e9))


def test_oracle_reads_bound_nothing() -> None:
    """Oracle moves KV in zero time: its would-be reads are kept, but never bind (stop 34:
    DS 660B Oracle at 0.58 read efficiency was reported 'storage_read'-bound)."""
    t = Traffic({"pe": 100e9, "de": 300e9}, cnic_bytes=12e9)
    oracle = dataclasses.replace(FACTS, io_bypassed=True)
    s = storage_bound(oracle, t)
    assert s["s"] is None and s["bypassed"] and s["by_path"]["de"]["s"] == pytest.approx(7.5)
    records = [_rec(1000, 900, 3), _rec(2000, 1900, 1)]
    b = bounds_section(Linear(), Linear(), oracle, records, t, jct=15.0, floor_s=None)
    assert b["binding"] != "storage_read" and b["storage_read"]["jct_over"] is None
    assert "bypassed (Oracle)" in "\n".join(bounds_lines({"bounds": b}))


def _rec(prompt: int, hit: int, gen: int) -> RequestRecord:
    return RequestRecord(1, 0, prompt, hit, gen, "pe", 0.0, 1.0, 1.1, 2.0)


def test_the_largest_bound_binds_and_jct_over_each() -> None:
    records = [_rec(1000, 900, 3), _rec(2000, 1900, 1)]
    t = Traffic({"pe": 100e9, "de": 300e9}, cnic_bytes=12e9)
    b = bounds_section(Linear(), Linear(), FACTS, records, t, jct=15.0, floor_s=10.0)
    assert b["binding"] == "floor"
    assert b["floor"]["jct_over"] == pytest.approx(1.5)
    assert b["storage_read"]["jct_over"] == pytest.approx(2.0)
    online = bounds_section(Linear(), Linear(), FACTS, records, t, jct=15.0, floor_s=None)
    assert online["binding"] == "storage_read" and online["floor"]["jct_over"] is None


def test_ttft_stages_in_the_paper_four_and_fig12() -> None:
    share: dict[str, float | None] = {
        **{"queue": 0.5, "buffer_wait": 0.1, "read": 0.2},
        **{"prefill_wait": 0.05, "transfer": 0.05, "prefill": 0.1},
    }
    assert paper_shares(share) == pytest.approx(
        {"scheduling": 0.55, "allocating": 0.1, "reading": 0.2, "prefill": 0.15}
    )
    process = {**share, "prefill_wait": None, "transfer": None}  # one undivided prefill
    assert paper_shares(process)["scheduling"] == pytest.approx(0.5)
    at = ttft_stages({"share": share}, "basic", "deepseek-v3.2", 0.25)
    assert at["paper"]["share"] == {"scheduling": 0.73}
    off = ttft_stages({"share": share}, "basic", "deepseek-v3.2", 0.1)
    assert off["paper"]["share"] is None
    assert off["paper"]["basic_scheduling_by_aps_group"] == [0.21, 0.40, 0.73]
    assert ttft_stages({"share": share}, "basic-guarded", "deepseek-v3.2", 0.25)["paper"] is None
    assert ttft_stages({"share": share}, "basic", "ds-27b", 0.25)["paper"] is None


@pytest.fixture(scope="module")
def smoke() -> dict[str, Any]:
    return simulate(resolve("smoke", {"workload": {"agents": 4}}, []))


def test_a_real_run_lies_above_every_bound(smoke: dict[str, Any]) -> None:
    b, jct = smoke["bounds"], smoke["jct_s"]
    assert b["floor"]["s"] == smoke["jct_floor_s"]
    for k in ("floor", "prefill", "decode", "storage_read", "cnic"):
        assert 0 < b[k]["s"] <= jct, k
        assert b[k]["jct_over"] == pytest.approx(jct / b[k]["s"])
    assert b["binding"] == max(("floor", "prefill", "decode", "storage_read", "cnic"),
                               key=lambda k: b[k]["s"])  # fmt: skip
    assert b["prefill"]["tokens"] == smoke["tokens"]["miss"]
    turns = smoke["requests"]["completed"]
    assert b["decode"]["tokens"] == smoke["tokens"]["generated"] - turns
    by_path = b["storage_read"]["by_path"]
    assert by_path["pe"]["bytes"] + by_path["de"]["bytes"] == pytest.approx(
        sum(smoke["read_bytes_by_path"].values())
    )
    assert "## Bounds on the JCT" in markdown_report(smoke)
