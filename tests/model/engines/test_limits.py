"""α, β (paper A.4) derived from the profiles, and every scheduler constant overridable."""

from __future__ import annotations

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.engines.hardware import GBPS_TO_BYTES
from dualpath.model.entities.request import ReadPath
from dualpath.model.roofline import Roofline, load_gpu, load_model
from dualpath.runtimes.cluster import derive_limits

CONTEXT, APPEND = 32_000, 400


def _rl(preset: str) -> tuple[Roofline, float]:
    sc = resolve(preset, {}, [])
    g = sc.topology.gpus_per_node * sc.topology.prefill_nodes
    return Roofline(load_model(sc.model), load_gpu(sc.gpu), g), sc.hardware.snic_gbps


@pytest.mark.parametrize("preset", ["paper-ds660b-2p4d", "paper-ds27b-1p1d"])
def test_alpha_is_what_one_snic_reads_in_3_s(preset: str) -> None:
    rl, snic_gbps = _rl(preset)
    lim = derive_limits(resolve(preset, {}, []), rl, CONTEXT, APPEND)
    assert lim.alpha == int(snic_gbps * GBPS_TO_BYTES * 3.0 / rl.kv_bytes_per_token)


@pytest.mark.parametrize("preset", ["paper-ds660b-2p4d", "paper-ds27b-1p1d"])
def test_beta_is_the_prompt_tokens_one_gpu_prefills_in_5_s(preset: str) -> None:
    rl, _ = _rl(preset)
    lim = derive_limits(resolve(preset, {}, []), rl, CONTEXT, APPEND)
    requests_in_5_s = 5.0 * rl.tokens_per_second(CONTEXT, APPEND) / APPEND
    assert lim.beta == pytest.approx(requests_in_5_s * (CONTEXT + APPEND), rel=1e-6)
    assert lim.compute_quota_s == pytest.approx(0.3)
    assert lim.z_factor == pytest.approx(1.05)
    assert lim.path_tie is ReadPath.DE


def test_time_windows_scale_alpha_and_beta() -> None:
    rl, _ = _rl("paper-ds660b-2p4d")
    base = derive_limits(resolve("paper-ds660b-2p4d", {}, []), rl, CONTEXT, APPEND)
    sets = ["policy.alpha_s=6", "policy.beta_s=10"]
    double = derive_limits(resolve("paper-ds660b-2p4d", {}, sets), rl, CONTEXT, APPEND)
    assert double.alpha == pytest.approx(2 * base.alpha, abs=1)
    assert double.beta == pytest.approx(2 * base.beta, abs=1)


def test_every_constant_can_be_overridden() -> None:
    rl, _ = _rl("paper-ds660b-2p4d")
    sets = [
        "policy.alpha_tokens=1234",
        "policy.beta_tokens=5678",
        "policy.z_factor=1.2",
        "policy.path_tie=pe",
        "engine.compute_quota_ms=150",
    ]
    lim = derive_limits(resolve("paper-ds660b-2p4d", {}, sets), rl, CONTEXT, APPEND)
    assert (lim.alpha, lim.beta, lim.z_factor, lim.path_tie) == (1234, 5678, 1.2, ReadPath.PE)
    assert lim.compute_quota_s == pytest.approx(0.15)
    sc = resolve("paper-ds660b-2p4d", {}, ["engine.fetch_interval_ms=20"])
    assert sc.engine.fetch_interval_ms == 20
