"""The emulation-lag meter (model/core/lag.py): every sample of a long run counts, quantiles
within the stated 1 % relative error, bounded memory, exported as a real histogram."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dualpath.model.core.clock import RealClock
from dualpath.model.core.lag import (
    EXPORT_BOUNDS,
    GAMMA,
    MIN_LAG_S,
    REL_ERROR,
    LagMeter,
    bucket_quantile,
)
from dualpath.runtimes.process.serving.prom import ServiceCollector, lag_summary, registry_for

N = 1_000_000
BOUND = REL_ERROR * (1 + 1e-9)  # the bound, plus float rounding at a bucket's edge


def _exact(sorted_samples: np.ndarray, q: float) -> float:
    n = len(sorted_samples)
    return float(sorted_samples[min(n - 1, int(q * n))])


def test_a_million_samples_within_the_bound_in_bounded_memory() -> None:
    rng = np.random.default_rng(7)
    # a run whose lag grows: its start is quiet (a fifth on time), its end lags 10x more.
    # The old meter kept only the first 100,000 samples and reported the quiet start.
    early = rng.lognormal(math.log(1e-3), 1.0, N // 2)
    early[: N // 10] = 0.0
    late = rng.lognormal(math.log(1e-2), 1.0, N - N // 2)
    samples = np.concatenate([early, late])
    meter = LagMeter()
    for x in samples.tolist():
        meter.record(x)
    ordered = np.sort(samples)
    assert meter.count == N and meter.sum == pytest.approx(float(samples.sum()))
    for q in (0.5, 0.9, 0.99, 0.999):
        want = _exact(ordered, q)
        assert abs(meter.quantile(q) - want) <= BOUND * want, q
    assert meter.quantile(0.99) > 0.05  # the late half decides the p99, as it should
    assert meter.quantile(1.0) == meter.max == float(samples.max())  # exact
    assert meter.quantile(0.05) == 0.0  # on-time samples are exactly 0
    # memory: one counter per bucket in use, bounded by the samples' range, not their number
    spread = math.log(float(samples.max()) / float(samples[samples > 0].min()))
    assert meter.buckets_in_use <= spread / math.log(GAMMA) + 2
    assert meter.buckets_in_use < 2_000


@pytest.mark.parametrize("value", [MIN_LAG_S * 2, 1e-6, 0.0123456, 1.0, 3.3, 999.0])
def test_every_single_value_comes_back_within_the_bound(value: float) -> None:
    meter = LagMeter()
    for _ in range(3):
        meter.record(value)
    meter.record(value * 10)  # the maximum, kept exactly: quantiles below it are estimated
    assert abs(meter.quantile(0.5) - value) <= BOUND * value
    assert meter.quantile(1.0) == value * 10


def test_empty_and_on_time() -> None:
    meter = LagMeter()
    assert meter.quantile(0.99) == 0.0 and meter.count == 0
    for _ in range(10):
        meter.record(0.0)
    assert meter.quantile(0.5) == meter.quantile(1.0) == 0.0 and meter.buckets_in_use == 0


def test_export_buckets_are_cumulative_with_le_semantics() -> None:
    meter = LagMeter()
    for x in (0.0, 0.001, 0.0011, 0.02, 50.0):  # 0.001 and 0.02 sit on bounds: counted there
        meter.record(x)
    b = dict(meter.buckets())
    assert list(b) == [*EXPORT_BOUNDS, math.inf]
    assert b[1e-4] == 1 and b[0.001] == 2 and b[0.002] == 3 and b[0.02] == 4
    assert b[10.0] == 4 and b[math.inf] == 5 == meter.count


def test_bucket_quantile_interpolates_like_prometheus() -> None:
    buckets = [(0.001, 50.0), (0.002, 90.0), (0.005, 100.0), (math.inf, 100.0)]
    assert bucket_quantile(buckets, 0.5) == pytest.approx(0.001)
    assert bucket_quantile(buckets, 0.7) == pytest.approx(0.0015)
    assert bucket_quantile(buckets, 0.25) == pytest.approx(0.0005)  # from 0 in the first
    assert bucket_quantile([(0.01, 1.0), (math.inf, 2.0)], 0.99) == 0.01  # above: last bound
    assert bucket_quantile([(0.01, 0.0), (math.inf, 0.0)], 0.99) == 0.0


def test_metrics_export_a_histogram_not_quantile_gauges() -> None:
    clock = RealClock(4.0)
    for x in (0.0, 0.0005, 0.003, 0.003, 0.04):
        clock.lag.record(x)
    text = generate_latest(registry_for(ServiceCollector("decode0", clock, [], dict))).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    hist = fams["dualpath_emulation_lag_seconds"]
    assert hist.type == "histogram"
    assert all("quantile" not in s.labels for s in hist.samples)
    by = {(s.name, s.labels.get("le")): s.value for s in hist.samples}
    assert by[("dualpath_emulation_lag_seconds_bucket", "0.005")] == 4
    assert by[("dualpath_emulation_lag_seconds_count", None)] == 5
    assert by[("dualpath_emulation_lag_seconds_sum", None)] == pytest.approx(0.0465)
    assert fams["dualpath_emulation_lag_max_seconds"].samples[0].value == 0.04
    # the report's keys are unchanged
    summary = lag_summary(clock)
    assert set(summary) == {"p50_s", "p99_s", "max_s", "samples"} and summary["samples"] == 5
    assert summary["max_s"] == 0.04 and abs(summary["p50_s"] - 0.003) <= BOUND * 0.003
