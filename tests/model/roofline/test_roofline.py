"""Roofline model: Table 1, monotonicity, Fig. 3 shape, HBM fit, all-to-all volume."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.roofline import (
    Roofline,
    batch_throughput,
    load_gpu,
    load_model,
    render_table,
    roofline_table,
)
from dualpath.model.roofline.geometry import causal_pairs, geometry, topk_pairs

H800 = load_gpu("h800")


@functools.cache  # Roofline is pure, so sharing instances between tests is safe
def rl(model: str, ep: int = 1, gpu: str = "h800") -> Roofline:
    return Roofline(load_model(model), load_gpu(gpu), ep)


# --- Table 1 ---------------------------------------------------------------------------
# Paper Table 1 / §3 text (docs/sources.md#table-1); 32.7K Qwen has no paper value:
# docs/sources.md#table-1-check.
TABLE1 = [
    ("qwen2.5-32b", 16384, 117.0),
    ("qwen2.5-32b", 32721, 185.0),
    ("qwen2.5-32b", 65536, 267.0),
    ("deepseek-v3.2", 16384, 13.0),
    ("deepseek-v3.2", 32721, 22.0),
    ("deepseek-v3.2", 65536, 36.0),
]


@pytest.mark.parametrize(("model", "context", "paper"), TABLE1)
def test_table1_within_10_percent(model: str, context: int, paper: float) -> None:
    ours = rl(model).cache_compute_ratio(context, 429)
    assert ours == pytest.approx(paper, rel=0.10)


# docs/sources.md#table-1-check "this formula" column: our FLOP count is that formula, so
# within 2 %.
DERIVED = [
    ("qwen2.5-32b", (115.8, 185.0, 265.4)),
    ("deepseek-v3.2", (12.2, 21.6, 35.1)),
    ("deepseek-v3", (4.34, 4.85, 5.15)),
]


@pytest.mark.parametrize(("model", "values"), DERIVED)
def test_table1_matches_constants_derivation(model: str, values: tuple[float, ...]) -> None:
    r = rl(model)
    for ctx, want in zip((16384, 32721, 65536), values, strict=True):
        assert r.cache_compute_ratio(ctx, 429) == pytest.approx(want, rel=0.02)


def test_ds27b_ratio_near_constants_estimate() -> None:
    assert rl("ds-27b").cache_compute_ratio(32721, 429) == pytest.approx(102, rel=0.03)


def test_ratio_is_the_table1_definition() -> None:
    r = rl("deepseek-v3.2")
    g = geometry(load_model("deepseek-v3.2"))
    c, n = 32721, 429
    att = 278_528 * topk_pairs(c, n, 2048) + 16_384 * causal_pairs(c, n)
    flops = n * 2 * g.active_params() + 61 * att
    assert r.cache_compute_ratio(c, n) == pytest.approx(c * 40_016 / flops * 1e6)


def test_roofline_table_rows_and_render() -> None:
    rows = roofline_table(["qwen2.5-32b", "deepseek-v3.2"])
    assert [(r["model"], r["context"]) for r in rows][:3] == [
        ("qwen2.5-32b", 16384),
        ("qwen2.5-32b", 32721),
        ("qwen2.5-32b", 65536),
    ]
    assert set(rows[0]) >= {"model", "context", "append", "gb_per_pflop", "paper_range"}
    assert rows[0]["paper"] == 117.0 and rows[1]["paper"] is None
    assert render_table(rows).row_count == len(rows)
    assert len(roofline_table()) == 3 * 4  # every shipped model by default


# --- KV and model facts ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "per_layer", "total"),
    [
        ("deepseek-v3.2", 656, 40_016),
        ("deepseek-v3", 656, 40_016),
        ("ds-27b", 656, 19_680),
        ("qwen2.5-32b", 4096, 262_144),
    ],
)
def test_kv_bytes(model: str, per_layer: int, total: int) -> None:
    r = rl(model)
    assert (r.kv_bytes_per_token_layer, r.kv_bytes_per_token) == (per_layer, total)


@pytest.mark.parametrize(
    ("model", "total_b", "active_b"),
    [("deepseek-v3", 671, 36.6), ("ds-27b", 27.2, 4.29), ("qwen2.5-32b", 32.8, 32.0)],
)
def test_param_counts_match_published(model: str, total_b: float, active_b: float) -> None:
    g = geometry(load_model(model))
    assert g.total_params() / 1e9 == pytest.approx(total_b, rel=0.01)
    assert g.active_params() / 1e9 == pytest.approx(active_b, rel=0.01)


def test_attended_caps_at_topk_only_for_dsa() -> None:
    assert rl("deepseek-v3.2").attended(1000) == 1000
    assert rl("deepseek-v3.2").attended(50_000) == 2048
    assert rl("ds-27b").attended(50_000) == 1024
    assert rl("qwen2.5-32b").attended(50_000) == 50_000


# --- HBM fit of the paper setups (P §7.2) -----------------------------------------------
@pytest.mark.parametrize(
    ("model", "ep", "low_gb", "high_gb"),
    [("deepseek-v3.2", 16, 50, 70), ("ds-27b", 8, 4, 10), ("qwen2.5-32b", 1, 64, 67)],
)
def test_weights_fit_in_hbm(model: str, ep: int, low_gb: float, high_gb: float) -> None:
    w = rl(model, ep).weight_bytes_per_gpu() / 1e9
    assert low_gb < w < high_gb < H800.hbm_gb


def test_660b_does_not_fit_one_node() -> None:
    assert rl("deepseek-v3.2", 8).weight_bytes_per_gpu() > H800.hbm_gb * 1e9


# --- monotonicity --------------------------------------------------------------------------
MODELS = st.sampled_from(["deepseek-v3.2", "ds-27b", "qwen2.5-32b", "deepseek-v3"])


@settings(max_examples=60, deadline=None)
@given(MODELS, st.integers(1, 256), st.integers(1, 70_000), st.integers(1, 64))
def test_decode_monotone_in_batch_and_context(model: str, b: int, ctx: int, more: int) -> None:
    r = rl(model, 16)

    def step(batch: int, c: int) -> float:
        return r.decode_step_time(batch, batch * c, batch * r.attended(c))

    base = step(b, ctx)
    assert base > 0
    assert step(b + more, ctx) >= base
    assert step(b, ctx + more * 100) >= base


@settings(max_examples=60, deadline=None)
@given(MODELS, st.integers(0, 70_000), st.integers(1, 4096), st.integers(1, 512))
def test_prefill_monotone(model: str, cached: int, new: int, more: int) -> None:
    r = rl(model, 16)
    base = r.prefill_time([(cached, new)])
    assert r.prefill_time([(cached, new + more)]) >= base
    assert r.prefill_time([(cached + more, new)]) >= base
    assert r.prefill_time([(cached, new), (cached, more)]) >= base
    assert 0 < r.prefill_attention_time([(cached, new)]) < base


def test_prefill_layers_partial_and_empty() -> None:
    r = rl("deepseek-v3.2", 16)
    batch = [(30_000, 300), (10_000, 1000)]
    full = r.prefill_time(batch)
    assert full == r.prefill_time(batch, 61)
    assert r.prefill_time(batch, 0) == 0.0 and r.prefill_time([]) == 0.0
    parts = [r.prefill_time(batch, n) for n in (1, 3, 4, 30, 61)]
    assert parts == sorted(parts)
    # Every MoE layer costs the same: the last 58 layers are linear in their count.
    per_moe = r.prefill_time(batch, 4) - r.prefill_time(batch, 3)
    assert full - r.prefill_time(batch, 3) == pytest.approx(58 * per_moe)


@pytest.mark.parametrize("group", [1, 4, 16, 60])
def test_layer_ranges_add_up_to_the_forward(group: int) -> None:
    """Engines time a forward in layer groups: the groups must sum to the whole forward,
    dense layers counted once where they are (the first layers), not in every group."""
    r = rl("deepseek-v3.2", 16)
    batch = [(30_000, 300), (10_000, 1000)]
    starts = range(0, 61, group)
    total = sum(r.prefill_time(batch, min(group, 61 - s), s) for s in starts)
    assert total == pytest.approx(r.prefill_time(batch))


def test_kernel_mode_is_faster_than_end_to_end() -> None:
    model = load_model("deepseek-v3.2")
    e2e, kern = Roofline(model, H800, 16), Roofline(model, H800, 16, mode="kernel")
    assert kern.prefill_time([(30_000, 300)]) < e2e.prefill_time([(30_000, 300)])
    assert kern.decode_step_time(32, 32 * 30_000, 32 * 2048) < e2e.decode_step_time(
        32, 32 * 30_000, 32 * 2048
    )


def test_faster_gpu_is_faster() -> None:
    shape = [(30_000, 300)] * 4
    times = [rl("deepseek-v3.2", 16, g).prefill_time(shape) for g in ("b200", "h200", "h800")]
    assert times == sorted(times)


def test_tokens_per_second_uses_a_quota_sized_batch() -> None:
    r = rl("deepseek-v3.2", 16)
    one = 429 / r.prefill_time([(32_721, 429)])
    tps = r.tokens_per_second(32_721, 429)
    assert tps > one  # batching several requests beats a lone one
    assert tps == pytest.approx(1 / r.prefill_time([(32_721, 429)] * 5) * 5 * 429)


# --- Fig. 3 right: shape only (figure readings 1.0 / 2.58 / 2.92 / 3.01, sources.md) --------------
@pytest.mark.parametrize(
    ("model", "ep"), [("deepseek-v3.2", 16), ("ds-27b", 8), ("qwen2.5-32b", 1)]
)
def test_fig3_batch_throughput_rises_then_saturates(model: str, ep: int) -> None:
    rel = batch_throughput(rl(model, ep))
    values = [rel[b] for b in (1, 2, 5, 10, 20)]
    assert values == sorted(values)
    assert rel[5] / rel[1] > 1.25  # steep start
    assert rel[20] / rel[10] < 1.1  # saturated by 10-20
    assert rel[5] - rel[1] > 3 * (rel[20] - rel[10])  # concave: most of the gain by 5


def test_fig3_small_model_rises_steeply() -> None:
    rel = batch_throughput(rl("ds-27b", 8))
    assert rel[5] / rel[1] > 1.5


# --- expert-parallel all-to-all ------------------------------------------------------------
def test_a2a_volume() -> None:
    r = rl("deepseek-v3.2", 16)
    assert r.a2a_bytes_per_layer(100) == pytest.approx(100 * 7168 * 8 * 3 * 15 / 16)
    assert r.a2a_bytes_per_decode_step(10) == pytest.approx(58 * r.a2a_bytes_per_layer(10))
    assert rl("qwen2.5-32b", 8).a2a_bytes_per_layer(100) == 0.0
    assert rl("deepseek-v3.2", 1).a2a_bytes_per_layer(100) == 0.0


def test_a2a_rdma_volume_counts_each_remote_node_once() -> None:
    # 2 nodes: a token reaches the other node with probability 1 - 0.5^8.
    r = rl("deepseek-v3.2", 16)
    assert r.a2a_rdma_bytes_per_layer(100) == pytest.approx(100 * 7168 * 3 * (1 - 0.5**8))
    assert r.a2a_rdma_bytes_per_layer(100) < r.a2a_bytes_per_layer(100) / 7
    assert rl("deepseek-v3.2", 8).a2a_rdma_bytes_per_layer(100) == 0.0  # one node: NVLink only
    assert rl("qwen2.5-32b", 16).a2a_rdma_bytes_per_layer(100) == 0.0


def test_rejects_bad_ep() -> None:
    with pytest.raises(ValueError, match="ep_gpus"):
        Roofline(load_model("deepseek-v3.2"), H800, 0)
