"""Per-layer parameter counts and attention FLOP coefficients derived from a ModelProfile.

Formulas follow docs/sources.md#flops: GEMM FLOPs = 2 × parameters × tokens; attention FLOPs per
(query, key) pair per layer `a` = 4·n_q·head_dim (GQA) or 2·n_heads·(d_qk + d_v) with
d_qk = kv_lora + rope, d_v = kv_lora (MLA absorbed / MQA mode, also every DSA kernel);
DSA indexer a_idx = 2·index_heads·index_head_dim over all keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from dualpath.model.roofline.profiles import AttentionSpec, ModelProfile


@dataclass(frozen=True, slots=True)
class Geometry:
    """Everything the roofline needs per layer, as plain numbers (computed once)."""

    layers: int
    dense_layers: int
    moe_layers: int
    hidden: int
    attn_params: int  # q/k/v/o (+ MLA LoRA, + DSA indexer projections) per layer
    dense_ffn_params: int  # FFN of a dense layer
    shared_params: int  # shared experts + router of a MoE layer (run on every token)
    expert_params: int  # one routed expert
    n_routed: int
    n_active: int
    head_params: int  # LM head (= embedding size)
    attn_pair_flops: int  # `a`: main attention, per (query, key) pair per layer
    index_pair_flops: int  # `a_idx`: DSA indexer per pair per layer (0 if not DSA)
    topk: int  # DSA keys per query (0 = dense attention)
    kv_layer: int  # KV bytes per token per layer
    index_layer: int  # indexer-key bytes per token per layer (not KV)
    # Dense-MLA prefill in MHA form (AttentionSpec.prefill_form): FLOPs per pair of the
    # decompressed attention, and the K/V up-projection parameters every attended token
    # (cached or new) goes through once per forward. Absorbed form: attn_pair_flops and 0.
    prefill_pair_flops: int = 0
    decompress_params: int = 0

    @property
    def is_moe(self) -> bool:
        return self.n_routed > 0

    def active_params(self) -> int:
        """Parameters touched per token incl. LM head, excl. embedding (constants §5c)."""
        moe_active = self.shared_params + self.n_active * self.expert_params
        return (
            self.layers * self.attn_params
            + self.dense_layers * self.dense_ffn_params
            + self.moe_layers * moe_active
            + self.head_params
        )

    def total_params(self) -> int:
        """All parameters incl. embedding and LM head."""
        moe_all = self.shared_params + self.n_routed * self.expert_params
        return (
            self.layers * self.attn_params
            + self.dense_layers * self.dense_ffn_params
            + self.moe_layers * moe_all
            + 2 * self.head_params
        )


def _attn_params(att: AttentionSpec, hidden: int) -> int:
    if att.kind == "gqa":
        q_o = 2 * hidden * att.n_heads * att.head_dim
        return q_o + 2 * hidden * att.n_kv_heads * att.head_dim
    d_qk = att.qk_nope_dim + att.qk_rope_dim
    if att.q_lora_rank:
        q = hidden * att.q_lora_rank + att.q_lora_rank * att.n_heads * d_qk
    else:
        q = hidden * att.n_heads * d_qk
    kv_a = hidden * (att.kv_lora_rank + att.qk_rope_dim)
    kv_b = att.kv_lora_rank * att.n_heads * (att.qk_nope_dim + att.v_head_dim)
    o = att.n_heads * att.v_head_dim * hidden
    params = q + kv_a + kv_b + o
    if att.kind == "dsa":
        # Indexer: query up-projection (from q-LoRA or hidden), one shared key, head weights.
        q_in = att.q_lora_rank or hidden
        params += q_in * att.index_heads * att.index_head_dim
        params += hidden * att.index_head_dim + hidden * att.index_heads
    return params


def _pair_flops(att: AttentionSpec) -> tuple[int, int]:
    if att.kind == "gqa":
        return 4 * att.n_heads * att.head_dim, 0
    d_qk = att.kv_lora_rank + att.qk_rope_dim
    a = 2 * att.n_heads * (d_qk + att.kv_lora_rank)
    a_idx = 2 * att.index_heads * att.index_head_dim if att.kind == "dsa" else 0
    return a, a_idx


def _prefill_form(att: AttentionSpec, a: int) -> tuple[int, int]:
    """(per-pair FLOPs, decompression params) of prefill attention; see Geometry."""
    if att.kind != "mla" or att.prefill_form == "absorbed":
        return a, 0
    d_qk = att.qk_nope_dim + att.qk_rope_dim
    return 2 * att.n_heads * (d_qk + att.v_head_dim), att.kv_lora_rank * att.n_heads * (
        att.qk_nope_dim + att.v_head_dim
    )


def geometry(model: ModelProfile) -> Geometry:
    ffn = model.ffn
    h = model.hidden
    a, a_idx = _pair_flops(model.attention)
    a_prefill, decompress = _prefill_form(model.attention, a)
    router = h * ffn.n_routed
    expert = 3 * h * ffn.moe_intermediate  # gate, up, down
    return Geometry(
        layers=model.layers,
        dense_layers=model.dense_layers,
        moe_layers=model.layers - model.dense_layers,
        hidden=h,
        attn_params=_attn_params(model.attention, h),
        dense_ffn_params=3 * h * ffn.dense_intermediate,
        shared_params=ffn.n_shared * expert + router,
        expert_params=expert,
        n_routed=ffn.n_routed,
        n_active=ffn.n_active,
        head_params=model.vocab * h,
        attn_pair_flops=a,
        index_pair_flops=a_idx,
        topk=model.attention.index_topk if model.attention.kind == "dsa" else 0,
        kv_layer=model.kv.bytes_per_token_layer,
        index_layer=model.kv.indexer_bytes_per_token_layer,
        prefill_pair_flops=a_prefill,
        decompress_params=decompress,
    )


def causal_pairs(cached: int, new: int) -> int:
    """(query, key) pairs when `new` tokens attend causally to `cached` + earlier new ones."""
    return new * cached + new * (new + 1) // 2


def topk_pairs(cached: int, new: int, topk: int) -> int:
    """Pairs when query at position p (1-based) attends min(p, topk) keys (DSA)."""
    # Queries at positions cached+1 .. cached+m still see fewer than topk keys.
    m = min(max(topk - cached, 0), new)
    return m * cached + m * (m + 1) // 2 + (new - m) * topk
