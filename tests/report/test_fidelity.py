"""The audited modelling choices (docs/fidelity.md): each is a setting or a profile, each
changes exactly what its source says and nothing else."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Iterator, Sequence

import pytest

from dualpath.model.config.settings import build_scenario
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.entities.request import EngineState, NodeState, Request
from dualpath.model.policies.base import Limits
from dualpath.model.policies.registry import UnknownPolicyError, default_registry
from dualpath.model.roofline import Roofline
from dualpath.model.roofline.calibration import fit_end_to_end, fit_per_phase
from dualpath.model.roofline.geometry import geometry
from dualpath.model.roofline.profiles import ModelProfile, load_gpu, load_model
from dualpath.runtimes.cluster import build_cluster

H800 = load_gpu("h800")


def _mha(model: ModelProfile) -> ModelProfile:
    att = model.attention.model_copy(update={"prefill_form": "mha"})
    return model.model_copy(update={"attention": att})


# --- item 2: DSA indexer keys are part of the cached KV -------------------------------------
def test_v32_kv_bytes_with_and_without_the_indexer_keys() -> None:
    v32 = load_model("deepseek-v3.2")
    assert Roofline(v32, H800, 16).kv_bytes_per_token == 40_016  # 656 B x 61 layers
    assert Roofline(v32, H800, 16, kv_indexer=True).kv_bytes_per_token == 48_068  # + 132 B


def test_table1_keeps_the_papers_kv_definition() -> None:
    v32 = load_model("deepseek-v3.2")
    plain, real = Roofline(v32, H800, 16), Roofline(v32, H800, 16, kv_indexer=True)
    assert real.cache_compute_ratio(32_768, 429) == plain.cache_compute_ratio(32_768, 429)


def test_models_without_an_indexer_are_unchanged() -> None:
    v3 = load_model("deepseek-v3")
    assert Roofline(v3, H800, 8, kv_indexer=True).kv_bytes_per_token == (
        Roofline(v3, H800, 8).kv_bytes_per_token
    )


def _cluster(**fidelity: object) -> tuple[int, float, float]:
    """(KV bytes per token, prefill0 SNIC read rate, its write rate) of a built cluster."""
    sc = build_scenario(
        {},
        {
            "model": "deepseek-v3.2",
            "topology": {"prefill_nodes": 2, "decode_nodes": 2},
            "hardware": {"snic_gbps": 400},
            "fidelity": fidelity,
        },
    )

    async def main(clock: VirtualClock) -> tuple[int, float, float]:
        c = build_cluster(sc, clock, 30_000, 400)
        c.scheduler.stop()
        node = c.hw.nodes["prefill0"]
        return c.scheduler.ctx.kv_token, node.snic_rx.rate, node.snic_tx.rate

    result: tuple[int, float, float] = run_virtual(main)
    return result


def test_the_cluster_moves_the_real_bytes_by_default() -> None:
    assert _cluster()[0] == 48_068
    assert _cluster(kv_indexer_cached=False)[0] == 40_016


# --- item 3: storage reads at 3FS's measured fraction of the SNIC line rate ---------------
def test_storage_reads_run_at_the_read_efficiency_persists_at_line_rate() -> None:
    _, read, write = _cluster()
    assert read == pytest.approx(0.86 * 50e9)
    assert write == pytest.approx(50e9)
    assert _cluster(storage_read_efficiency=1.0)[1] == pytest.approx(50e9)


def test_read_efficiency_bounds_name_the_field() -> None:
    with pytest.raises(ValueError, match="storage_read_efficiency"):
        build_scenario({}, {"fidelity": {"storage_read_efficiency": 1.5}})


# --- item 5: prefill MLA counted in MHA form ------------------------------------------------
def test_mha_form_pair_flops_and_decompression() -> None:
    g = geometry(_mha(load_model("deepseek-v3")))
    assert g.prefill_pair_flops == 2 * 128 * (128 + 64 + 128)
    assert g.decompress_params == 512 * 128 * (128 + 128)
    absorbed = geometry(load_model("deepseek-v3"))
    assert (absorbed.prefill_pair_flops, absorbed.decompress_params) == (
        absorbed.attn_pair_flops,
        0,
    )


def test_dsa_kernels_stay_mqa_form_under_the_mha_setting() -> None:
    v32 = load_model("deepseek-v3.2")
    assert geometry(_mha(v32)).decompress_params == 0


def test_mha_counting_has_no_physical_joint_fit_so_each_phase_gets_a_scale() -> None:
    with pytest.raises(ValueError, match="no physical fit"):
        fit_end_to_end(_mha(load_model("deepseek-v3")), H800)
    s_p, s_d = fit_per_phase(_mha(load_model("deepseek-v3")), H800)
    e2e = load_gpu("h800-mha").end_to_end  # the shipped profile is this fit, not a guess
    assert e2e.prefill_scale == pytest.approx(s_p, abs=5e-4)
    assert e2e.decode_scale == pytest.approx(s_d, abs=5e-4)
    assert e2e.layer_overhead_s == 0.0


def test_absorbed_counting_per_phase_fit_is_the_joint_fit() -> None:
    s_p, s_d = fit_per_phase(load_model("deepseek-v3"), H800)
    assert s_p == s_d == pytest.approx(load_gpu("h800").end_to_end.prefill_scale, abs=5e-4)


# --- item 4: Basic without DualPath's machinery ---------------------------------------------
@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


LIMITS = Limits(alpha=1000, beta=1000, compute_quota_s=0.3, kv_bytes_per_token=10)


def _req(loop: asyncio.AbstractEventLoop, rid: int, prompt: int) -> Request:
    return Request(
        rid=rid, session=rid, turn=0, prompt=prompt, gen=0, arrival=0.0, done=loop.create_future()
    )


def test_basic_ignores_the_beta_guard(loop: asyncio.AbstractEventLoop) -> None:
    """The paper's Basic has "no scheduler" (§7.2): no β guard; basic-guarded keeps it."""
    busy = EngineState("pe0", 0, NodeState("p0", "prefill", 0), 0, 0, tok=10 * LIMITS.beta)
    for name, placed in (("basic-guarded", 0), ("basic", 1)):
        policy = default_registry().create(name, LIMITS, 0)
        out = policy.assign_prefill(deque([_req(loop, 0, 100)]), [busy])
        assert len(out) == placed, name


def test_basic_batches_past_the_compute_quota(loop: asyncio.AbstractEventLoop) -> None:
    """A.4 gives the compute quota to DualPath and Oracle only."""

    def slow(batch: Sequence[tuple[int, int]]) -> float:
        return 10.0 * len(batch)  # every request alone busts the 300 ms quota

    for name, size in (("basic-guarded", 1), ("basic", 3)):
        policy = default_registry().create(name, LIMITS, 0)
        ready = deque(_req(loop, i, 100) for i in range(3))
        assert len(policy.form_batch(ready, slow, 1e9)) == size, name


def test_basic_is_still_bound_by_hbm(loop: asyncio.AbstractEventLoop) -> None:
    policy = default_registry().create("basic", LIMITS, 0)
    ready = deque(_req(loop, i, 100) for i in range(3))
    batch = policy.form_batch(ready, lambda b: 0.0, 2 * 100 * LIMITS.kv_bytes_per_token)
    assert [i.request.rid for i in batch] == [0, 1]


def test_the_old_basic_bare_name_is_refused_naming_the_fix() -> None:
    with pytest.raises(UnknownPolicyError, match=r"now 'basic'.*'basic-guarded'"):
        default_registry().get("basic-bare")


def test_running_caps_bound_a_forward_and_a_decode_gpu(loop: asyncio.AbstractEventLoop) -> None:
    """engine.max_running_prefill / _decode (vLLM max_num_seqs, SGLang
    max_running_requests): at most that many requests per forward and per decode GPU."""
    capped = dataclasses.replace(LIMITS, max_running_prefill=2, max_running_decode=1)
    policy = default_registry().create("dualpath", capped, 0)
    ready = deque(_req(loop, i, 100) for i in range(3))
    assert len(policy.form_batch(ready, lambda b: 0.0, None)) == 2
    de = EngineState("de0", 0, NodeState("d0", "decode", 0), 0, 0, free_hbm=1e12)
    assert policy.decode_fits(_req(loop, 5, 100), de)
    de.seq = 1
    assert not policy.decode_fits(_req(loop, 5, 100), de)
    free = default_registry().create("dualpath", LIMITS, 0)
    assert free.decode_fits(_req(loop, 5, 100), de)


# --- HBM kept out of the KV pool as a fraction of the GPU's HBM ----------------------------
def _kv_hbm(**hardware: float) -> float:
    sc = build_scenario({}, {"model": "deepseek-v3.2", "gpu": "h800",
                             "topology": {"prefill_nodes": 2, "decode_nodes": 2},
                             "hardware": hardware})  # fmt: skip

    async def main(clock: VirtualClock) -> float:
        c = build_cluster(sc, clock, 30_000, 400)
        c.scheduler.stop()
        return c.hw.gpu_of(c.decode_groups[0][0]).kv_hbm

    kv: float = run_virtual(main)
    return kv


def test_hbm_reserve_fraction_takes_the_larger_reserve() -> None:
    base = _kv_hbm()  # 4 GB reserved on an 80 GB H800
    assert _kv_hbm(hbm_reserve_fraction=0.02) == pytest.approx(base)  # 1.6 GB < 4 GB
    assert _kv_hbm(hbm_reserve_fraction=0.1) == pytest.approx(base - 4e9)  # 8 GB
    assert _kv_hbm(hbm_reserve_fraction=0.1, hbm_reserve_gb=0) == pytest.approx(base - 4e9)


def test_deepseek_presets_keep_sglangs_deepseek_pd_reserve() -> None:
    """The DS presets keep 15 % of HBM out of weights + KV, SGLang's DeepSeek-V3 PD + EP
    deployment's mem_fraction_static 0.85 (docs/sources.md S32); Qwen's (DP only, no
    all-to-all buffers, no source) keeps the flat 4 GB."""
    from dualpath.model.config.presets import resolve

    for preset in ("paper-ds660b-2p4d", "paper-ds27b-1p1d"):
        assert resolve(preset, {}, []).hardware.hbm_reserve_fraction == 0.15
    qwen = resolve("paper-qwen32b-1p2d", {}, []).hardware
    assert (qwen.hbm_reserve_fraction, qwen.hbm_reserve_gb) == (0.0, 4.0)


def test_running_caps_at_engine_defaults_change_nothing_and_a_small_one_slows() -> None:
    """vLLM's max_num_seqs (256/1024) is far above the smoke run's batches: the same run;
    one request per decode GPU serialises decode and the job takes longer."""
    from dualpath.model.config.presets import resolve
    from dualpath.runtimes.virtual.sim import simulate

    def jct(**engine: int) -> float:
        sc = resolve("smoke", {"workload": {"agents": 4}, "engine": engine}, [])
        return float(simulate(sc)["jct_s"])

    base = jct()
    assert jct(max_running_prefill=256, max_running_decode=256) == base
    assert jct(max_running_decode=1) > base


# --- Table 2's reading: Append and Gen as pooled per-turn means -----------------------------
def test_the_pooled_reading_has_larger_turns_and_keeps_context() -> None:
    from dualpath.model.workload.stats import trajectory_stats
    from dualpath.model.workload.synthetic import pooled_trajectories, synthetic_trajectories

    today = trajectory_stats(synthetic_trajectories(64 * 1024, 500, 0))
    pooled = trajectory_stats(pooled_trajectories(64 * 1024, 500, 0))
    assert pooled["append_pooled"] > 1.2 * today["append_pooled"]  # ≈ 318 vs 250 tokens
    assert pooled["gen_pooled"] > 1.4 * today["gen_pooled"]  # ≈ 162 vs 106
    assert pooled["context"] == pytest.approx(32_721, rel=0.03)  # Table 2's Context holds
    assert pooled["total"] > 1.1 * 55_958  # Total does not: the reading's cost


def test_the_pooled_reading_refuses_a_maxlen_it_was_not_fitted_for() -> None:
    from dualpath.model.workload.synthetic import pooled_trajectories

    with pytest.raises(ValueError, match=r"synthetic-pooled.*64k only"):
        pooled_trajectories(32 * 1024, 4, 0)


# --- First prompts: a short one (the WEKA sessions' system prompt), the rest refitted ---------
def test_the_short_first_prompt_lowers_the_start_up_work_and_costs_table2() -> None:
    from dualpath.model.workload.stats import trajectory_stats
    from dualpath.model.workload.synthetic import short_first_trajectories, synthetic_trajectories

    today = trajectory_stats(synthetic_trajectories(64 * 1024, 500, 0))
    short = trajectory_stats(short_first_trajectories(64 * 1024, 500, 0))
    assert short["first_append"] == pytest.approx(2_789, rel=0.05)  # WEKA's system_tokens
    assert short["first_append"] < 0.3 * today["first_append"]  # ≈ 2.8K vs 11.0K tokens
    assert short["turns"] == pytest.approx(157, rel=0.05)  # Turns, Append, Gen still hold
    assert short["context"] < 0.97 * 32_721  # Context does not: the reading's cost


def test_the_short_first_prompt_at_48k_holds_table2_as_at_64k() -> None:
    """Fig. 15 and the scale rows run at 48K: the same reading, fitted to that row."""
    from dualpath.model.workload.stats import trajectory_stats
    from dualpath.model.workload.synthetic import short_first_trajectories, synthetic_trajectories

    today = trajectory_stats(synthetic_trajectories(48 * 1024, 500, 0))
    short = trajectory_stats(short_first_trajectories(48 * 1024, 500, 0))
    assert short["first_append"] == pytest.approx(2_789, rel=0.05)
    assert short["first_append"] < 0.35 * today["first_append"]
    assert short["turns"] == pytest.approx(106, rel=0.05)  # Table 2's 48K row
    assert short["gen"] == pytest.approx(172, rel=0.05)
    assert short["context"] < 0.97 * 25_120  # the reading's cost, as at 64K


def test_the_short_first_prompt_refuses_a_maxlen_it_was_not_fitted_for() -> None:
    from dualpath.model.workload.synthetic import short_first_trajectories

    with pytest.raises(ValueError, match=r"synthetic-short-first.*48k, 64k only"):
        short_first_trajectories(32 * 1024, 4, 0)
