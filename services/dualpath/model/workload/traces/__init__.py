"""Trace replay: real request traces as a `Workload` (see docs/traces.md).

Pure code (stdlib json + lzma, no asyncio): the Locust process imports it too.
"""

from dualpath.model.workload.traces.errors import TraceError
from dualpath.model.workload.traces.mooncake import load_mooncake
from dualpath.model.workload.traces.prefix import (
    ChainPlan,
    ChainPlanner,
    HitStats,
    hit_stats,
    infinite_cache_hit,
    owner,
    plan_chains,
)
from dualpath.model.workload.traces.registry import TRACE_FORMATS, detect_format, load_trace
from dualpath.model.workload.traces.weka import load_weka, weka_files

__all__ = [
    "TRACE_FORMATS",
    "ChainPlan",
    "ChainPlanner",
    "HitStats",
    "TraceError",
    "detect_format",
    "hit_stats",
    "infinite_cache_hit",
    "load_mooncake",
    "load_trace",
    "load_weka",
    "owner",
    "plan_chains",
    "weka_files",
]
