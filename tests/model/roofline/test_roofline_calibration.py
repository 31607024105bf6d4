"""The shipped efficiency numbers are what the documented fits produce."""

from __future__ import annotations

import pytest

from dualpath.model.roofline import ProductionFigures, Roofline, load_gpu, load_model
from dualpath.model.roofline.calibration import (
    S3_GROUPED_GEMM_H800,
    fit_end_to_end,
    fit_gemm_curve,
    fit_scale_overhead,
    mean_request,
)

H800 = load_gpu("h800")


def test_gemm_curve_fit_reproduces_profile() -> None:
    gemm_max, m_half = fit_gemm_curve(S3_GROUPED_GEMM_H800, H800.fp8_tflops)
    assert gemm_max == pytest.approx(H800.kernel.gemm_max, abs=5e-4)
    assert m_half == H800.kernel.gemm_m_half


def test_mean_request_shape() -> None:
    cached, new, out = mean_request(ProductionFigures())
    assert (cached, new, out) == (2468, 1915, 1211)


def test_end_to_end_fit_reproduces_profile() -> None:
    fit = fit_end_to_end(load_model("deepseek-v3"), H800)
    e2e = H800.end_to_end
    assert fit.scale == pytest.approx(e2e.prefill_scale, abs=5e-4)
    assert fit.scale == pytest.approx(e2e.decode_scale, abs=5e-4)
    assert fit.layer_overhead_s == pytest.approx(e2e.layer_overhead_s, rel=0.01)
    assert "s = 0.598" in fit.describe()


@pytest.mark.parametrize("k", [1, 2, 8, 16])
def test_fit_insensitive_to_assumed_prefill_batch(k: int) -> None:
    fit = fit_end_to_end(
        load_model("deepseek-v3"), H800, ProductionFigures(prefill_requests_per_forward=k)
    )
    assert fit.scale == pytest.approx(H800.end_to_end.prefill_scale, rel=0.05)


@pytest.mark.parametrize("name", ["h100", "h200", "b200"])
def test_other_gpus_inherit_the_h800_fit(name: str) -> None:
    assert load_gpu(name).end_to_end.model_dump(exclude={"source"}) == (
        H800.end_to_end.model_dump(exclude={"source"})
    )


def test_calibrated_model_reproduces_production_throughput() -> None:
    """With the shipped numbers, DeepSeek-V3 on H800 runs at the S5 production rates."""
    f = ProductionFigures()
    v3 = load_model("deepseek-v3")
    prod = v3.model_copy(
        update={
            "kv": v3.kv.model_copy(update={"bytes_per_token_layer": f.kv_bytes_per_token_layer})
        }
    )
    cached, new, _ = mean_request(f)
    prefill = Roofline(prod, H800, f.prefill_ep).prefill_time([(cached, new)] * 4)
    per_gpu = f.prefill_input_tok_s_per_node * (1 - f.cache_hit_fraction) / f.gpus_per_node
    assert 4 * new / prefill == pytest.approx(per_gpu, rel=0.01)
    b = 88
    step = Roofline(prod, H800, f.decode_ep).decode_step_time(b, b * 4989, b * 4989)
    assert step == pytest.approx(1 / 21, rel=0.01)
    assert b * 8 / step == pytest.approx(f.decode_output_tok_s_per_node, rel=0.02)


def test_rejects_unphysical_inputs() -> None:
    # Production faster than the kernel roofline cannot be fitted with s <= 1.
    with pytest.raises(ValueError, match="no physical fit"):
        fit_end_to_end(
            load_model("deepseek-v3"), H800, ProductionFigures(prefill_input_tok_s_per_node=1e7)
        )


def test_scale_overhead_fit_recovers_known_values() -> None:
    s, o = 0.5, 2e-4
    samples = [(k, n, k / s + n * o) for k, n in [(0.01, 61), (0.5, 61), (2.0, 30), (0.1, 30)]]
    fit_s, fit_o, err = fit_scale_overhead(samples)
    assert fit_s == pytest.approx(s)
    assert fit_o == pytest.approx(o)
    assert err == pytest.approx(0.0, abs=1e-9)


def test_scale_overhead_fit_reports_error_and_rejects_degenerate() -> None:
    noisy = [(0.01, 61, 0.035), (0.5, 61, 1.02), (2.0, 61, 4.1)]
    assert fit_scale_overhead(noisy)[2] > 0.0
    with pytest.raises(ValueError, match="two samples"):
        fit_scale_overhead([(0.1, 61, 0.2)])
    with pytest.raises(ValueError, match="separate"):
        fit_scale_overhead([(0.1, 61, 0.2), (0.2, 122, 0.4)])
