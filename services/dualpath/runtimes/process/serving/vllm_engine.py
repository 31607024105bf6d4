"""A node's engines as vLLM engine cores on /metrics: the scheduler-state gauges and the
per-step histograms, labelled `model_name` and `engine` as vLLM labels them
(vllm/v1/metrics/loggers.py, vLLM 0.33.0; docs/monitoring.md has the table).

`engine` is our engine id (`prefill0.gpu0`), where vLLM puts its engine index: one of our
nodes holds several engines, as a vLLM server with data parallelism holds several cores.
Read from the units at scrape time, like every other gauge of a service.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from dualpath.model.engines.context import EngineContext
from dualpath.model.engines.decode import DecodeUnit
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.entities.steps import Hist

LABELS = ["model_name", "engine"]


def engine_families(
    model: str, ctx: EngineContext, units: Sequence[PrefillUnit | DecodeUnit]
) -> Iterable[Metric]:
    running = GaugeMetricFamily(
        "vllm:num_requests_running", "Requests in the engine's batch", labels=LABELS
    )
    waiting = GaugeMetricFamily(
        "vllm:num_requests_waiting",
        "Requests on the engine not yet in its batch (PE: ready FIFO; DE: KV moving to HBM)",
        labels=LABELS,
    )
    kv = GaugeMetricFamily(
        "vllm:kv_cache_usage_perc", "Decode HBM KV usage, 1 = full", labels=LABELS
    )
    preempt = CounterMetricFamily(
        "vllm:num_preemptions", "Preemptions (none: HBM is reserved at placement)", labels=LABELS
    )
    tokens = HistogramMetricFamily(
        "vllm:iteration_tokens_total", "Tokens per engine step", labels=LABELS
    )
    itl = HistogramMetricFamily(
        "vllm:inter_token_latency_seconds", "Emulated inter-token latency", labels=LABELS
    )
    for unit in units:
        views = (
            {b.engine_id: b for b in unit.running_batches()} if isinstance(unit, DecodeUnit) else {}
        )
        for e in unit.engines:
            eid = e.engine_id
            lab = [model, eid]
            steps = ctx.metrics.steps_of(eid)
            preempt.add_metric(lab, steps.preemptions)
            _hist(tokens, lab, steps.iteration_tokens)
            if isinstance(unit, DecodeUnit):
                b = views[eid]
                running.add_metric(lab, b.running)
                waiting.add_metric(lab, unit.waiting[eid])
                kv.add_metric(lab, b.context_tokens * ctx.kv_token / ctx.hw.gpus[eid].kv_hbm)
                _hist(itl, lab, steps.inter_token)
            else:
                running.add_metric(lab, unit.running.get(eid, 0))
                waiting.add_metric(lab, len(unit.ready[eid]))
    return (running, waiting, kv, preempt, tokens, itl)


def _hist(family: HistogramMetricFamily, labels: list[str], h: Hist) -> None:
    cum = h.cumulative()
    buckets = [("+Inf" if math.isinf(le) else repr(float(le)), float(n)) for le, n in cum]
    family.add_metric(labels, buckets, h.total)
