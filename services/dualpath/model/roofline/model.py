"""Calibrated roofline compute model of one GPU (docs/roofline.md, sources.md#roofline-recipe).

Per operator t = max(F / (η_c·s·peak), B / (η_m·s·BW)); a layer is the sum of its operators
plus a fixed per-layer overhead, a decode step adds a per-step overhead. η are kernel-level
fractions (GPU profile `kernel`), s is the end-to-end factor fitted to production throughput
(GPU profile `end_to_end`, see calibration.py). GEMM efficiency depends on the GEMM's M
(tokens per weight matrix): η_c(M) = η_max·M/(M + M½), so a GEMM costs
2·params·(M + M½)/(η_max·s·peak): M½ acts as a fixed token overhead per weight matrix, one
reason small batches are inefficient (paper Fig. 3 right); the per-layer overhead is the other.

Pure and allocation-light: every per-token constant is computed once in __init__; the hot
methods are a few float operations per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

from dualpath.model.roofline.geometry import causal_pairs, geometry, topk_pairs
from dualpath.model.roofline.profiles import GpuProfile, ModelProfile

Mode = Literal["end_to_end", "kernel"]
BYTES_PER_GB_PER_PFLOP = 1e6  # (B / 1e9) / (FLOP / 1e15) = B/FLOP · 1e6
_FFN_CACHE_MAX: Final = 1 << 16  # bound on memoised Σ-new-token values per instance


class DecodeGemms:
    """A decode step's GEMM terms for one batch size, in seconds: attention projections,
    dense FFN and MoE FFN (per layer) and the LM head (fields: native doubles compiled)."""

    __slots__ = ("attn_proj", "dense", "head", "moe")

    def __init__(self, attn_proj: float, dense: float, moe: float, head: float) -> None:
        self.attn_proj = attn_proj
        self.dense = dense
        self.moe = moe
        self.head = head


class Roofline:
    """Time of prefill forwards and decode steps on ONE GPU of an EP group of `ep_gpus`."""

    def __init__(
        self,
        model: ModelProfile,
        gpu: GpuProfile,
        ep_gpus: int,
        *,
        mode: Mode = "end_to_end",
        kv_indexer: bool = False,
    ) -> None:
        """`kv_indexer`: the DSA indexer keys are part of the cached KV (stored, moved and
        held in HBM with it; settings `fidelity.kv_indexer_cached`)."""
        if ep_gpus < 1:
            raise ValueError(f"ep_gpus must be >= 1, got {ep_gpus}")
        self.model, self.gpu, self.ep_gpus, self.mode = model, gpu, ep_gpus, mode
        g = self._g = geometry(model)
        k = gpu.kernel
        self.layers: int = g.layers
        self.moe_layers: int = g.moe_layers
        kv_layer = g.kv_layer + (g.index_layer if kv_indexer else 0)
        self.kv_bytes_per_token_layer: int = kv_layer
        self.kv_bytes_per_token: int = kv_layer * g.layers
        e2e = mode == "end_to_end"
        sp = gpu.end_to_end.prefill_scale if e2e else 1.0
        sd = gpu.end_to_end.decode_scale if e2e else 1.0
        n_ops = 3 + (1 if g.index_pair_flops else 0) + (1 if g.is_moe else 0)
        self._layer_ovh = gpu.end_to_end.layer_overhead_s if e2e else n_ops * k.op_overhead_s
        self._step_ovh = gpu.end_to_end.step_overhead_s if e2e else 0.0
        self._mh = k.gemm_m_half
        wb, bw = model.weight_bytes, gpu.hbm_tb_s * 1e12
        gemm_peak = gpu.peak_flops(model.gemm_dtype)
        bf16, fp8 = gpu.peak_flops("bf16"), gpu.peak_flops("fp8")
        # Seconds per unit of work, end-to-end factor folded in (prefill p_, decode d_).
        self._p_gemm = 2.0 / (k.gemm_max * sp * gemm_peak)  # × params × (M + M½)
        self._d_gemm = 2.0 / (k.gemm_max * sd * gemm_peak)
        self._p_mem = 1.0 / (k.mem * sp * bw)  # × bytes
        self._d_mem = 1.0 / (k.mem * sd * bw)
        self._p_att = (g.prefill_pair_flops or g.attn_pair_flops) / (k.attn_prefill * sp * bf16)
        # MHA-form prefill: K/V up-projection of every attended token, a large-M BF16 GEMM.
        self._p_decomp = 2.0 * g.decompress_params / (k.gemm_max * sp * bf16)
        self._p_idx = g.index_pair_flops / (k.attn_prefill * sp * fp8)
        att_dec = k.attn_decode_sparse if g.topk else k.attn_decode
        self._d_att = g.attn_pair_flops / (att_dec * sd * bf16)
        self._d_idx = g.index_pair_flops / (k.attn_decode * sd * fp8)
        self._d_att_mem = 1.0 / (k.mem_attn_decode * sd * bw)
        # The geometry's counts a decode step reads, as native fields: `g` is a frozen
        # dataclass of an uncompiled module, and a compiled step paid a dict lookup a field.
        self._g_kv_layer: int = g.kv_layer
        self._g_index_pair: int = g.index_pair_flops
        self._g_index_layer: int = g.index_layer
        self._g_dense_layers: int = g.dense_layers
        self._g_topk: int = g.topk
        self._moe: bool = g.is_moe  # (a property of that dataclass: a Python call a read)
        self._kv_mem = g.kv_layer * self._p_mem  # prefill seconds per KV token touched
        self._idx_mem = g.index_layer * self._p_mem
        # Weight bytes resident on this GPU, per operator group.
        self._w_attn = g.attn_params * wb
        self._w_dense = g.dense_ffn_params * wb
        self._w_shared = g.shared_params * wb
        self._local_experts = math.ceil(g.n_routed / ep_gpus) if g.is_moe else 0
        self._w_expert = g.expert_params * wb
        self._w_head = g.head_params * model.embed_bytes
        self._act = 4.0 * g.hidden  # bytes per token per GEMM group: BF16 in + out
        # The FFN/projection cost depends only on Σ new tokens, which repeats a lot.
        self._ffn_cache: dict[int, tuple[float, float]] = {}
        # A decode step's GEMM terms depend only on the batch size (bounded by HBM): a list
        # by batch size, where a dict boxed the size for every lookup in a compiled build.
        self._decode_by_size: list[DecodeGemms | None] = []

    # --- static facts ------------------------------------------------------------------
    def weight_bytes_per_gpu(self) -> float:
        """Experts sharded over ep_gpus, attention/dense/shared/embedding replicated."""
        g = self._g
        per_moe_layer = self._w_shared + self._local_experts * self._w_expert
        return (
            g.layers * self._w_attn
            + g.dense_layers * self._w_dense
            + g.moe_layers * per_moe_layer
            + 2 * self._w_head
        )

    def attended(self, ctx: int) -> int:
        """Keys one decode query attends: min(ctx, top-k) under DSA, else ctx."""
        topk = self._g_topk
        return ctx if not topk or ctx < topk else topk

    # --- prefill -----------------------------------------------------------------------
    def _gemm(self, params: float, m: float, weight_bytes: float, per: float, mem: float) -> float:
        return max(params * (m + self._mh) * per, (weight_bytes + m * self._act) * mem)

    def _prefill_attention_layer(self, batch: Sequence[tuple[int, int]]) -> float:
        # Pair counts inlined (geometry.causal_pairs / topk_pairs): this is the hot loop.
        topk = self._g.topk
        main = idx = tokens = 0
        if topk:
            for cached, new in batch:
                causal = new * cached + new * (new + 1) // 2
                m = min(max(topk - cached, 0), new)
                main += m * cached + m * (m + 1) // 2 + (new - m) * topk
                idx += causal
                tokens += cached + 2 * new
        else:
            for cached, new in batch:
                main += new * cached + new * (new + 1) // 2
                tokens += cached + 2 * new
        # Bytes: every key read once plus the layer's new KV written (tokens = c + 2n).
        t = max(main * self._p_att, tokens * self._kv_mem)
        if self._p_decomp:  # MHA form: (c + n) tokens decompressed = tokens - n
            t += (tokens - sum(new for _, new in batch)) * self._p_decomp
        if idx:
            t += max(idx * self._p_idx, tokens * self._idx_mem)
        return t

    def _prefill_ffn_layers(self, n: int) -> tuple[float, float]:
        """(dense-layer, MoE-layer) time of the projections and FFN for n new tokens."""
        hit = self._ffn_cache.get(n)
        if hit is None:
            if len(self._ffn_cache) >= _FFN_CACHE_MAX:
                self._ffn_cache.clear()
            hit = self._ffn_cache[n] = self._ffn_layers(n)
        return hit

    def _ffn_layers(self, n: int) -> tuple[float, float]:
        g, per, mem = self._g, self._p_gemm, self._p_mem
        attn_proj = self._gemm(g.attn_params, n, self._w_attn, per, mem)
        dense = attn_proj + self._gemm(g.dense_ffn_params, n, self._w_dense, per, mem)
        if not self._moe:
            return dense, dense
        shared = self._gemm(g.shared_params, n, self._w_shared, per, mem)
        return dense, attn_proj + shared + self._routed(n, per, mem)

    def _routed(self, tokens: float, per: float, mem: float) -> float:
        """Grouped GEMM over this GPU's experts; every EP peer runs the same batch shape."""
        g = self._g
        pairs = tokens * g.n_active  # token-expert pairs landing here under balanced routing
        # Expected distinct local experts hit by tokens·ep_gpus tokens choosing k of E each.
        miss: float = (1.0 - g.n_active / g.n_routed) ** (tokens * self.ep_gpus)
        touched = self._local_experts * (1.0 - miss)
        if touched <= 0:
            return 0.0
        flops_t = g.expert_params * (pairs + touched * self._mh) * per
        return max(flops_t, (touched * self._w_expert + pairs * self._act) * mem)

    def prefill_time(
        self, batch: Sequence[tuple[int, int]], n_layers: int | None = None, first_layer: int = 0
    ) -> float:
        """Seconds for layers [first_layer, first_layer + n_layers) of one forward on one GPU
        (default: all layers).

        batch: (cached_tokens, new_tokens) per request. The EP all-to-all is NOT included:
        DeepSeek overlaps it with compute (two micro-batches); the caller moves
        a2a_bytes_per_layer() on the CNIC and takes the max.
        """
        nl = self.layers if n_layers is None else n_layers
        n = 0
        for _, new in batch:  # a loop, not sum() of a generator: a generic call compiled
            n += new
        if nl <= 0 or n <= 0:
            return 0.0
        attn = self._prefill_attention_layer(batch)
        dense_t, moe_t = self._prefill_ffn_layers(n)
        n_dense = max(0, min(first_layer + nl, self._g_dense_layers) - first_layer)
        return nl * (attn + self._layer_ovh) + n_dense * dense_t + (nl - n_dense) * moe_t

    def prefill_attention_time(self, batch: Sequence[tuple[int, int]]) -> float:
        """Predicted attention-only time of a whole forward (paper §6.2 compute quota)."""
        if not batch:
            return 0.0
        return self.layers * self._prefill_attention_layer(batch)

    def tokens_per_second(self, context: int, append: int, *, quota_s: float = 0.3) -> float:
        """New tokens one GPU prefills per second for requests of this shape.

        The batch is what the paper's engine would form: as many such requests as fit the
        attention compute quota (300 ms, paper A.4), at least one.
        """
        if append <= 0:
            raise ValueError("append must be > 0")
        one = [(context, append)]
        att = self.prefill_attention_time(one)
        # 1024 requests only bounds the work: throughput has long saturated by then.
        k = max(1, min(1024, int(quota_s / att))) if att > 0 else 1024
        return k * append / self.prefill_time(one * k)

    # --- decode ------------------------------------------------------------------------
    def decode_step_time(self, batch_size: int, sum_context: int, sum_attended: int) -> float:
        """One decode step of batch_size requests on one GPU (one new token each).

        sum_context: Σ context lengths; sum_attended: Σ attended(ctx) (= sum_context unless
        DSA). The EP all-to-all is overlapped, as in prefill_time().
        """
        if batch_size <= 0:
            return 0.0
        # max(compute, memory) written out: the builtin's call cost more than the arithmetic
        # (per GPU per decode chunk); max(a, b) is b only if b > a, as here.
        att = sum_attended * self._d_att
        att_mem = sum_attended * self._g_kv_layer * self._d_att_mem
        if att_mem > att:  # noqa: PLR1730 - see above
            att = att_mem
        if self._g_index_pair:
            idx = sum_context * self._d_idx
            idx_mem = sum_context * self._g_index_layer * self._d_att_mem
            att += idx_mem if idx_mem > idx else idx
        cache = self._decode_by_size
        hit = cache[batch_size] if batch_size < len(cache) else None
        if hit is None:
            hit = self._decode_gemms(batch_size)
            if batch_size < _FFN_CACHE_MAX:  # (bounded memory: larger sizes are not kept)
                if batch_size >= len(cache):
                    cache.extend([None] * (batch_size + 1 - len(cache)))
                cache[batch_size] = hit
        layer = att + hit.attn_proj + self._layer_ovh
        return (
            self.layers * layer
            + self._g_dense_layers * hit.dense
            + self.moe_layers * hit.moe
            + hit.head
            + self._step_ovh
        )

    def _decode_gemms(self, b: int) -> DecodeGemms:
        """(attention projections, dense FFN, MoE FFN, LM head) of one step of b tokens."""
        g, per, mem = self._g, self._d_gemm, self._d_mem
        attn_proj = self._gemm(g.attn_params, b, self._w_attn, per, mem)
        dense = self._gemm(g.dense_ffn_params, b, self._w_dense, per, mem)
        moe = 0.0
        if self._moe:
            moe = self._gemm(g.shared_params, b, self._w_shared, per, mem)
            moe += self._routed(b, per, mem)
        head = self._gemm(g.head_params, b, self._w_head, per, mem)
        return DecodeGemms(attn_proj, dense, moe, head)

    # --- expert-parallel traffic -------------------------------------------------------
    def a2a_bytes_per_layer(self, new_tokens: int) -> float:
        """Bytes one GPU sends per MoE layer: FP8 dispatch + BF16 combine to k experts.

        The share (ep-1)/ep leaves the GPU (NVLink and RDMA alike); 0 for dense models.
        """
        g = self._g
        if not self._moe or self.ep_gpus <= 1:
            return 0.0
        return new_tokens * g.hidden * g.n_active * 3.0 * (self.ep_gpus - 1) / self.ep_gpus

    def a2a_bytes_per_decode_step(self, batch_size: int) -> float:
        """All-to-all bytes one GPU sends in one decode step (all MoE layers)."""
        return self.moe_layers * self.a2a_bytes_per_layer(batch_size)

    def a2a_rdma_bytes_per_layer(self, new_tokens: int, gpus_per_node: int = 8) -> float:
        """Bytes per MoE layer one GPU sends over RDMA (its CNIC) with DeepEP-style routing.

        DeepEP sends a token once per remote node and forwards it inside that node over
        NVLink (S7), so only E[distinct remote nodes among k experts] copies cross the CNIC,
        instead of (ep-1)/ep · k copies in a2a_bytes_per_layer().
        """
        g = self._g
        nodes = self.ep_gpus // gpus_per_node
        if not self._moe or nodes <= 1:
            return 0.0
        remote: float = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** g.n_active)
        return new_tokens * g.hidden * 3.0 * remote

    # --- Table 1 -----------------------------------------------------------------------
    def flops_per_appended_token(self, context: int, append: int) -> float:
        """GEMM (2·P_act incl. LM head) + attention FLOPs of one request, per new token."""
        g = self._g
        if append <= 0:
            raise ValueError("append must be > 0")
        if g.topk:
            att = g.attn_pair_flops * topk_pairs(context, append, g.topk)
            att += g.index_pair_flops * causal_pairs(context, append)
        else:
            att = g.attn_pair_flops * causal_pairs(context, append)
        return 2.0 * g.active_params() + g.layers * att / append

    def cache_compute_ratio(self, context: int, append: int) -> float:
        """GB of cached KV per PFLOP of compute (Table 1; docs/sources.md#table-1-check)."""
        flops = append * self.flops_per_appended_token(context, append)
        table1_kv = self._g.kv_layer * self._g.layers  # the paper's KV, without indexer keys
        return context * table1_kv / flops * BYTES_PER_GB_PER_PFLOP
