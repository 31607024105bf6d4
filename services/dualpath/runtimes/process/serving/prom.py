"""Prometheus metrics of a service, read from its core objects at scrape time.

Each service gets its own `CollectorRegistry` (several services share a process in tests).
Names follow vLLM where one exists; link metrics are the ones docs/monitoring.md lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from dualpath.model.core.clock import RealClock
from dualpath.model.links import Link

Gauges = Callable[[], dict[str, list[tuple[dict[str, str], float]]]]
Families = Callable[[], Iterable[Metric]]


class ServiceCollector(Collector):
    def __init__(
        self,
        service: str,
        clock: RealClock,
        links: list[Link],
        gauges: Gauges,
        families: Families = tuple,
    ) -> None:
        self.service = service
        self.clock = clock
        self.links = links
        self.gauges = gauges
        self.families = families  # whole metric families (a node's vLLM engine metrics)

    def collect(self) -> Iterable[Metric]:
        yield from self._links()
        yield from self._lag()
        yield from self.families()
        for name, samples in self.gauges().items():
            labels = sorted({k for s, _ in samples for k in s})
            g = GaugeMetricFamily(name, f"{name} (emulated)", labels=labels)
            for lab, value in samples:
                g.add_metric([lab.get(k, "") for k in labels], value)
            yield g

    def _links(self) -> Iterable[Metric]:
        by = CounterMetricFamily(
            "dualpath_link_bytes", "Emulated bytes moved per link and VL", labels=["link", "vl"]
        )
        busy = CounterMetricFamily(
            "dualpath_link_busy_seconds", "Emulated seconds with traffic", labels=["link"]
        )
        util = GaugeMetricFamily(
            "dualpath_link_utilization",
            "Mean used fraction of the rate since t=0",
            labels=["link"],
        )
        now = max(self.clock.now(), 1e-9)
        for link in self.links:
            for vl, b in sorted(link.bytes_by_vl.items()):
                by.add_metric([link.name, str(vl)], b)
            busy.add_metric([link.name], link.busy_s)
            util.add_metric([link.name], link.bytes_total / (link.rate * now))
        yield from (by, busy, util)

    def _lag(self) -> Iterable[Metric]:
        # every wake-up since the service started (model/core/lag.py); quantiles over a window
        # come from rate() of the buckets (histogram_quantile)
        meter = self.clock.lag
        lag = HistogramMetricFamily(
            "dualpath_emulation_lag_seconds",
            "How late timed wake-ups ran, emulated seconds",
            labels=["service"],
        )
        buckets = [("+Inf" if math.isinf(le) else repr(le), float(n)) for le, n in meter.buckets()]
        lag.add_metric([self.service], buckets, meter.sum)
        yield lag
        worst = GaugeMetricFamily(
            "dualpath_emulation_lag_max_seconds",
            "The latest any timed wake-up ran, emulated seconds",
            labels=["service"],
        )
        worst.add_metric([self.service], meter.max)
        yield worst
        d = GaugeMetricFamily("dualpath_dilation", "Emulated seconds per wall second")
        d.add_metric([], self.clock.dilation)
        yield d


def registry_for(collector: Collector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def lag_summary(clock: RealClock) -> dict[str, Any]:
    lag = clock.lag
    return {
        "p50_s": lag.quantile(0.5),
        "p99_s": lag.quantile(0.99),
        "max_s": lag.quantile(1.0),
        "samples": lag.count,
    }
