"""Model and GPU profiles: frozen pydantic schemas over the YAML data files.

The numbers live in `dualpath/profiles/{models,gpus}/*.yaml` (package data), never in code,
so a user can add a model or a GPU by passing a path, or by name from an installed package
(entry-point group `dualpath.profiles`, docs/plugins.md). Every file carries a `source:`
string that cites docs/sources.md (its anchors and S-tags) and states any fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dualpath.model.roofline.profile_files import shelf

AttentionKind = Literal["gqa", "mla", "dsa"]
GemmDtype = Literal["bf16", "fp8"]


class ProfileError(ValueError):
    """A profile name, file or field is wrong; the message names it and what is accepted."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AttentionSpec(_Frozen):
    """Attention geometry. `gqa` uses n_kv_heads/head_dim; `mla`/`dsa` use the MLA ranks."""

    kind: AttentionKind
    n_heads: int = Field(gt=0)
    # GQA
    n_kv_heads: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)
    # MLA (absorbed / MQA mode: d_qk = kv_lora + rope, d_v = kv_lora)
    q_lora_rank: int = Field(default=0, ge=0)  # 0 = no q-LoRA (DS 27B, paper A.2)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_dim: int = Field(default=0, ge=0)
    qk_nope_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    # DSA lightning indexer
    index_heads: int = Field(default=0, ge=0)
    index_head_dim: int = Field(default=0, ge=0)
    index_topk: int = Field(default=0, ge=0)
    # How dense-MLA prefill is counted: "absorbed" (MQA form, as decode and every DSA kernel)
    # or "mha" (K/V decompressed, DeepSeek-V3's published inference code for prefill).
    prefill_form: Literal["absorbed", "mha"] = "absorbed"

    @model_validator(mode="after")
    def _check_kind_fields(self) -> AttentionSpec:
        need: dict[str, tuple[str, ...]] = {
            "gqa": ("n_kv_heads", "head_dim"),
            "mla": ("kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim"),
            "dsa": (
                "kv_lora_rank",
                "qk_rope_dim",
                "qk_nope_dim",
                "v_head_dim",
                "index_heads",
                "index_head_dim",
                "index_topk",
            ),
        }
        missing = [f for f in need[self.kind] if getattr(self, f) == 0]
        if missing:
            raise ValueError(f"attention kind {self.kind!r} needs non-zero {', '.join(missing)}")
        return self


class KvSpec(_Frozen):
    """Bytes one token's KV occupies in one layer, as stored and transferred."""

    bytes_per_token_layer: int = Field(gt=0)
    dtype: str
    # DSA indexer keys: read by the indexer every step but NOT counted as KV (Table 1 is
    # reproduced with the 656 B MLA entry only, docs/sources.md#kv-bytes).
    indexer_bytes_per_token_layer: int = Field(default=0, ge=0)


class FfnSpec(_Frozen):
    dense_intermediate: int = Field(gt=0)
    moe_intermediate: int = Field(default=0, ge=0)
    n_routed: int = Field(default=0, ge=0)  # 0 = dense model
    n_active: int = Field(default=0, ge=0)
    n_shared: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check_moe(self) -> FfnSpec:
        if self.n_routed and not (self.moe_intermediate and 0 < self.n_active <= self.n_routed):
            raise ValueError("MoE ffn needs moe_intermediate > 0 and 0 < n_active <= n_routed")
        return self


class ModelProfile(_Frozen):
    name: str
    display_name: str
    source: str = Field(min_length=1)
    layers: int = Field(gt=0)
    dense_layers: int = Field(ge=0)  # leading dense-FFN layers (all layers when not MoE)
    hidden: int = Field(gt=0)
    vocab: int = Field(gt=0)
    weight_bytes: float = Field(gt=0)  # per linear-layer parameter (FP8 = 1, BF16 = 2)
    embed_bytes: float = Field(gt=0)  # embedding and LM head stay BF16 in FP8 checkpoints
    gemm_dtype: GemmDtype
    attention: AttentionSpec
    kv: KvSpec
    ffn: FfnSpec

    @model_validator(mode="after")
    def _check_layers(self) -> ModelProfile:
        if self.dense_layers > self.layers:
            raise ValueError("dense_layers exceeds layers")
        if not self.ffn.n_routed and self.dense_layers != self.layers:
            raise ValueError("a dense model (ffn.n_routed = 0) needs dense_layers == layers")
        return self


class KernelEfficiency(_Frozen):
    """Kernel-level fractions of peak: microbenchmark upper bounds (docs/sources.md)."""

    source: str = Field(min_length=1)
    gemm_max: float = Field(gt=0, le=1)  # η_c(M) = gemm_max · M / (M + gemm_m_half)
    gemm_m_half: float = Field(ge=0)  # tokens per GEMM (per expert) at half of gemm_max
    attn_prefill: float = Field(gt=0, le=1)
    attn_decode: float = Field(gt=0, le=1)
    attn_decode_sparse: float = Field(gt=0, le=1)
    mem: float = Field(gt=0, le=1)
    mem_attn_decode: float = Field(gt=0, le=1)
    op_overhead_s: float = Field(ge=0)  # per roofline operator (launch, tail)


class EndToEndFit(_Frozen):
    """System-level factors fitted to production throughput (calibration.py)."""

    source: str = Field(min_length=1)
    prefill_scale: float = Field(gt=0, le=1)  # multiplies every η in prefill
    decode_scale: float = Field(gt=0, le=1)  # multiplies every η in decode
    layer_overhead_s: float = Field(ge=0)  # per layer per forward / step (sync, launch)
    step_overhead_s: float = Field(ge=0)  # per decode step (CPU scheduling, sampling)


class CalibrationRow(_Frozen):
    """One measured step against the fitted roofline (a `dualpath calibrate` residual)."""

    line: int = Field(ge=1)  # line of the measurement CSV
    phase: Literal["prefill", "decode"]
    batch: int = Field(ge=1)
    context_tokens: int = Field(ge=0)
    new_tokens: int = Field(ge=1)
    ep_gpus: int = Field(ge=1)
    measured_ms: float = Field(gt=0)
    fitted_ms: float = Field(ge=0)
    rel_error: float  # fitted / measured - 1


class CalibrationRecord(_Frozen):
    """What `dualpath calibrate` fitted `end_to_end` to and how well. Informational: the
    roofline never reads it, so a profile prices compute the same with or without it."""

    source: str = Field(min_length=1)
    model: str
    rows: int = Field(ge=2)
    rms_rel_error: float = Field(ge=0)
    max_rel_error: float = Field(ge=0)  # largest |fitted / measured - 1|
    max_rel_error_line: int = Field(ge=1)
    residuals: tuple[CalibrationRow, ...] = ()


class GpuProfile(_Frozen):
    name: str
    display_name: str
    source: str = Field(min_length=1)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float = Field(gt=0)
    hbm_gb: float = Field(gt=0)
    hbm_tb_s: float = Field(gt=0)
    kernel: KernelEfficiency
    end_to_end: EndToEndFit
    # Only in profiles written by `dualpath calibrate`; the shipped ones have none.
    calibration: CalibrationRecord | None = None

    def peak_flops(self, dtype: GemmDtype) -> float:
        return (self.fp8_tflops if dtype == "fp8" else self.bf16_tflops) * 1e12


_P = TypeVar("_P", bound=BaseModel)


def model_names() -> list[str]:
    """Names of the model profiles: shipped with the package, then from installed plug-ins
    (entry-point group `dualpath.profiles`, docs/plugins.md)."""
    return list(shelf("models").files)


def gpu_names() -> list[str]:
    """Names of the GPU profiles: shipped, then from installed plug-ins."""
    return list(shelf("gpus").files)


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path


def _read(kind: str, what: str, name_or_path: str) -> tuple[str, str]:
    """Return (file label, YAML text) for a profile name or a filesystem path."""
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(f"{what} profile file not found: {name_or_path}")
        return str(path), path.read_text(encoding="utf-8")
    found = shelf(kind)
    if name_or_path in found.refused:
        raise ProfileError(f"{what} {name_or_path!r}: {found.refused[name_or_path]}")
    if name_or_path not in found.files:
        accepted = ", ".join(found.files)
        raise ProfileError(
            f"unknown {what} {name_or_path!r}; accepted: {accepted} (or a path to a .yaml file)"
        )
    label, entry = found.files[name_or_path]
    return label, entry.read_text(encoding="utf-8")


def _parse(cls: type[_P], label: str, text: str) -> _P:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{label}: malformed YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{label}: expected a mapping at the top level")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc']) or '<root>'}': {err['msg']}"
            for err in exc.errors()
        )
        raise ProfileError(f"{label}: {problems}") from exc


def load_model(name_or_path: str) -> ModelProfile:
    """Load a model profile by shipped name (see `model_names()`) or YAML path."""
    label, text = _read("models", "model", name_or_path)
    return _parse(ModelProfile, label, text)


def load_gpu(name_or_path: str) -> GpuProfile:
    """Load a GPU profile by shipped name (see `gpu_names()`) or YAML path."""
    label, text = _read("gpus", "gpu", name_or_path)
    return _parse(GpuProfile, label, text)


__all__ = [
    "AttentionSpec",
    "CalibrationRecord",
    "CalibrationRow",
    "EndToEndFit",
    "FfnSpec",
    "GpuProfile",
    "KernelEfficiency",
    "KvSpec",
    "ModelProfile",
    "ProfileError",
    "gpu_names",
    "load_gpu",
    "load_model",
    "model_names",
]
