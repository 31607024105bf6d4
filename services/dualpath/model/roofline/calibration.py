"""Fits behind the GPU profiles' efficiency numbers (documented in docs/roofline.md).

1. `fit_gemm_curve`: η_c(M) = η_max·M/(M + M½) least-squares fitted to DeepGEMM's H800
   grouped-GEMM table (S3): a kernel-level upper bound.
2. `fit_end_to_end`: one efficiency scale s (applied to every η) and one fixed overhead per
   layer o, solved from DeepSeek's V3/R1 production throughput on H800 (S5 day_6): one
   prefill equation and one decode equation, two unknowns. Never fitted to DualPath figures.
3. `fit_measurements`: the same s and o, least-squares fitted to a user's own step times
   (`dualpath calibrate`, rows parsed by roofline.measurements).

The shipped YAML stores the results; tests re-run these fits and compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dualpath.model.roofline.measurements import Measurement
from dualpath.model.roofline.model import Roofline
from dualpath.model.roofline.profiles import GpuProfile, ModelProfile

# (tokens per expert group M, TFLOPS) measured on H800 (S3; docs/sources.md#kernel-efficiency).
# Masked layout points are the README table's rows; the contiguous layout is given there as a
# range 1,214–1,346 TFLOPS for M/group 4–8K, assigned here in increasing order of M.
S3_GROUPED_GEMM_H800: tuple[tuple[float, float], ...] = (
    (256.0, 815.0),
    (256.0, 932.0),
    (512.0, 916.0),
    (512.0, 1040.0),
    (1024.0, 925.0),
    (1024.0, 1233.0),
    (4096.0, 1214.0),
    (8192.0, 1346.0),
)


def fit_gemm_curve(
    points: Sequence[tuple[float, float]], peak_tflops: float, *, max_m_half: int = 4096
) -> tuple[float, float]:
    """Least-squares (η_max, M½) of η(M) = η_max·M/(M + M½) to (M, TFLOPS) points.

    For a fixed M½ the optimal η_max is closed-form, so an integer scan of M½ suffices.
    """
    ys = [t / peak_tflops for _, t in points]
    best = (float("inf"), 0.0, 0.0)
    for m_half in range(max_m_half + 1):
        xs = [m / (m + m_half) for m, _ in points]
        e = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
        sse = sum((e * x - y) ** 2 for x, y in zip(xs, ys, strict=True))
        if sse < best[0]:
            best = (sse, e, float(m_half))
    return best[1], best[2]


@dataclass(frozen=True, slots=True)
class ProductionFigures:
    """DeepSeek V3/R1 online service on H800, 24 h average (S5 day_6).

    Figures and their use: docs/sources.md#production-calibration."""

    prefill_input_tok_s_per_node: float = 73_700.0  # incl. cache hits
    cache_hit_fraction: float = 0.563
    decode_output_tok_s_per_node: float = 14_800.0
    user_tok_s: float = 21.0  # "20–22 tokens/s" per user: midpoint
    mean_kv_len: int = 4_989  # mean KV length per output token
    input_tokens: float = 608e9  # 24 h totals (S5), used only for the request shape
    output_tokens: float = 168e9
    gpus_per_node: int = 8
    prefill_ep: int = 32  # prefill EP32/DP32 (4 nodes)
    decode_ep: int = 144  # decode EP144/DP144 (18 nodes)
    # FlashMLA was BF16-only when these figures were published (Feb 2025, S4): 576 × 2 B.
    kv_bytes_per_token_layer: int = 1_152
    # Assumption (not published): requests of the mean shape per prefill forward per GPU.
    # The fit moves by < 5 % between 1 and 16.
    prefill_requests_per_forward: int = 4


@dataclass(frozen=True, slots=True)
class EndToEndResult:
    scale: float  # s: every η is multiplied by this
    layer_overhead_s: float  # o: fixed seconds per layer per forward / step
    cached: int  # mean prefill request: cached (hit) tokens
    new: int  # mean prefill request: computed tokens
    decode_batch: int  # requests per decode GPU
    prefill_kernel_s: float  # kernel-η roofline time of one prefill forward (no overhead)
    prefill_target_s: float  # production time of that forward
    decode_kernel_s: float
    decode_target_s: float

    def describe(self) -> str:
        return (
            f"prefill forward of {self.new}-token x {self.cached}-cached requests: "
            f"kernel roofline {self.prefill_kernel_s * 1e3:.1f} ms vs production "
            f"{self.prefill_target_s * 1e3:.1f} ms; decode step of {self.decode_batch} "
            f"requests: {self.decode_kernel_s * 1e3:.2f} ms vs {self.decode_target_s * 1e3:.2f} "
            f"ms; solved s = {self.scale:.3f}, o = {self.layer_overhead_s * 1e6:.0f} us/layer"
        )


def mean_request(f: ProductionFigures) -> tuple[int, int, int]:
    """(cached, new, output) tokens of the mean request, from S5's 24 h totals.

    Output tokens see contexts from L_in to L_in + L_out, so mean KV ≈ L_in + L_out/2; with
    L_in/L_out = input/output totals this gives L_out and L_in.
    """
    ratio = f.input_tokens / f.output_tokens
    l_out = f.mean_kv_len / (ratio + 0.5)
    l_in = ratio * l_out
    cached = round(f.cache_hit_fraction * l_in)
    return cached, round(l_in) - cached, round(l_out)


def kernel_only(gpu: GpuProfile) -> GpuProfile:
    """The GPU with no per-operator overhead: `Roofline(..., mode="kernel")` on it gives K."""
    kernel = gpu.kernel.model_copy(update={"op_overhead_s": 0.0})
    return gpu.model_copy(update={"kernel": kernel})


def fit_scale_overhead(samples: Sequence[tuple[float, int, float]]) -> tuple[float, float, float]:
    """Fit T ≈ K/s + L·o to (K kernel seconds, L layers, T measured seconds) samples.

    T is linear in x = 1/s and o, so this is a 2×2 least-squares solve on relative errors
    (every sample weighs the same whatever its duration). Returns (s, o, rms relative error);
    two samples give the exact solution. Meant for `calibrate` on a user's measurements too.
    """
    if len(samples) < 2:
        raise ValueError("need at least two samples to fit a scale and an overhead")
    # Normal equations of Σ ((x·K + o·L − T) / T)².
    a11 = a12 = a22 = b1 = b2 = 0.0
    for k, n_layers, t in samples:
        u, v = k / t, n_layers / t
        a11, a12, a22 = a11 + u * u, a12 + u * v, a22 + v * v
        b1, b2 = b1 + u, b2 + v
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-12 * max(a11 * a22, 1e-300):
        raise ValueError("samples do not separate scale from overhead (vary batch shapes)")
    x = (b1 * a22 - b2 * a12) / det
    o = (a11 * b2 - a12 * b1) / det
    if x <= 0:
        raise ValueError("fitted efficiency scale is not positive: measurements too fast")
    sq = [((x * k + o * n_layers) / t - 1.0) ** 2 for k, n_layers, t in samples]
    return 1.0 / x, o, (sum(sq) / len(sq)) ** 0.5


def _production_shapes(
    model: ModelProfile, gpu: GpuProfile, f: ProductionFigures
) -> tuple[int, int, int, tuple[float, float], tuple[float, float]]:
    """(cached, new, decode batch, (K_p, T_p), (K_d, T_d)) of the production figures."""
    kv = model.kv.model_copy(update={"bytes_per_token_layer": f.kv_bytes_per_token_layer})
    prod = model.model_copy(update={"kv": kv})
    g = kernel_only(gpu)
    cached, new, _ = mean_request(f)
    k = f.prefill_requests_per_forward
    computed_per_gpu = f.prefill_input_tok_s_per_node * (1 - f.cache_hit_fraction)
    computed_per_gpu /= f.gpus_per_node
    t_p = k * new / computed_per_gpu
    k_p = Roofline(prod, g, f.prefill_ep, mode="kernel").prefill_time([(cached, new)] * k)
    b = round(f.decode_output_tok_s_per_node / f.gpus_per_node / f.user_tok_s)
    ctx = b * f.mean_kv_len
    k_d = Roofline(prod, g, f.decode_ep, mode="kernel").decode_step_time(b, ctx, ctx)
    return cached, new, b, (k_p, t_p), (k_d, 1.0 / f.user_tok_s)


def fit_end_to_end(
    model: ModelProfile, gpu: GpuProfile, figures: ProductionFigures | None = None
) -> EndToEndResult:
    """Solve K_p/s + L·o = T_p and K_d/s + L·o = T_d for s and o.

    K_p, K_d: kernel-η roofline times (no overhead) of a production prefill forward and
    decode step; T_p, T_d: the times production throughput implies.
    """
    f = figures or ProductionFigures()
    cached, new, b, (k_p, t_p), (k_d, t_d) = _production_shapes(model, gpu, f)
    try:
        scale, o, _ = fit_scale_overhead([(k_p, model.layers, t_p), (k_d, model.layers, t_d)])
    except ValueError as exc:
        raise ValueError(f"no physical fit: {exc}") from exc
    if not (scale <= 1.0 and o >= 0.0):
        raise ValueError(f"no physical fit (s = {scale:.3f}, o = {o:.2e} s): check the inputs")
    return EndToEndResult(scale, o, cached, new, b, k_p, t_p, k_d, t_d)


def fit_per_phase(
    model: ModelProfile, gpu: GpuProfile, figures: ProductionFigures | None = None
) -> tuple[float, float]:
    """(prefill_scale, decode_scale) with no per-layer overhead: s_p = K_p/T_p, s_d = K_d/T_d.

    The fallback when the joint fit puts the overhead below zero (no engine has a negative
    fixed cost): the same two production figures, one scale per phase. Counting prefill MLA
    in MHA form (`AttentionSpec.prefill_form`) is such a case (docs/fidelity.md)."""
    f = figures or ProductionFigures()
    try:
        r = fit_end_to_end(model, gpu, f)
    except ValueError:
        _, _, _, (k_p, t_p), (k_d, t_d) = _production_shapes(model, gpu, f)
        return k_p / t_p, k_d / t_d
    return r.scale, r.scale


# --- a user's own measurements (`dualpath calibrate`, docs/roofline.md) -------------------


def fit_scale_only(samples: Sequence[tuple[float, int, float]]) -> float:
    """Least-squares s of T ≈ K/s with no overhead, on relative errors (the constrained fit
    when the free one puts the overhead below zero, which no engine can have)."""
    u = [k / t for k, _, t in samples]
    x = sum(u) / sum(v * v for v in u)  # minimises Σ (x·K/T − 1)²
    return 1.0 / x


@dataclass(frozen=True, slots=True)
class Residual:
    """One measurement against the fitted end-to-end roofline."""

    row: Measurement
    kernel_s: float  # K: kernel-η roofline time, no overhead
    fitted_s: float  # K/s + L·o

    @property
    def rel_error(self) -> float:
        return self.fitted_s / self.row.step_s - 1.0


@dataclass(frozen=True, slots=True)
class MeasuredFit:
    scale: float  # s: every η (prefill and decode) is multiplied by this
    layer_overhead_s: float  # o: seconds per layer per forward / step
    overhead_clamped: bool  # the free fit gave o < 0: refitted s alone with o = 0
    residuals: tuple[Residual, ...]

    @property
    def rms_rel_error(self) -> float:
        return math.sqrt(sum(r.rel_error**2 for r in self.residuals) / len(self.residuals))

    @property
    def worst(self) -> Residual:
        return max(self.residuals, key=lambda r: abs(r.rel_error))


def kernel_time(rl: Roofline, m: Measurement) -> float:
    """The roofline time of a measured shape (`rl` in kernel mode on a `kernel_only` GPU)."""
    if m.phase == "prefill":
        return rl.prefill_time([(m.context_tokens, m.new_tokens)] * m.batch)
    b, ctx = m.batch, m.context_tokens
    return rl.decode_step_time(b, b * ctx, b * rl.attended(ctx))


def fit_measurements(
    model: ModelProfile, gpu: GpuProfile, rows: Sequence[Measurement]
) -> MeasuredFit:
    """Fit one s and one o to measured step times (the production fit's method, on the
    user's rows): T ≈ K/s + L·o with K from the GPU's kernel-level efficiencies.

    Raises ValueError naming the problem when the rows cannot give a physical fit."""
    g = kernel_only(gpu)
    rooflines: dict[int, Roofline] = {}
    kernels: list[float] = []
    for m in rows:
        rl = rooflines.get(m.ep_gpus)
        if rl is None:
            rl = rooflines[m.ep_gpus] = Roofline(model, g, m.ep_gpus, mode="kernel")
        kernels.append(kernel_time(rl, m))
    samples = [(k, model.layers, m.step_s) for k, m in zip(kernels, rows, strict=True)]
    scale, o, _ = fit_scale_overhead(samples)
    clamped = o < 0
    if clamped:
        scale, o = fit_scale_only(samples), 0.0
    if scale > 1.0:
        raise ValueError(
            f"fitted efficiency scale s = {scale:.3f} > 1: the measurements are faster than "
            f"{model.name}'s kernel-level roofline on {gpu.name}; check --model, --gpu, the "
            "EP group size (ep_gpus / --ep) and that step_ms is in milliseconds"
        )
    fitted = [k / scale + model.layers * o for k in kernels]
    residuals = tuple(Residual(m, k, f) for m, k, f in zip(rows, kernels, fitted, strict=True))
    return MeasuredFit(scale, o, clamped, residuals)
