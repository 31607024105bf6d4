"""What a load test reports besides Locust's own statistics (gevent side).

- EMU rows: every answered turn fires extra request events, request_type "EMU", whose
  response time is the EMULATED TTFT / TTST / TPOT / turn latency (ms) from the response's
  timings, so the web UI's charts, the CSV and the HTML report show them as their own rows.
- The SLO verdict, printed when a test stops and written to `--slo-json`.
- The progress record (`--progress-file`) that `dualpath run` follows.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from locust.env import Environment
from locust.stats import RequestStats, console_logger

from dualpath.loadgen.command import write_json_atomic
from dualpath.loadgen.scripts import total_turns
from dualpath.loadgen.slo import Summary, describe, share_within, verdict

if TYPE_CHECKING:
    from dualpath.loadgen.locust_driver import Loadgen

log = logging.getLogger("dualpath.loadgen")

EMU = "EMU"
# (row name, timing field of the response, fewest generated tokens for it to exist)
EMU_ROWS = (("TTFT", "ttft_s", 1), ("TTST", "ttst_s", 2), ("TPOT", "tpot_s", 3))
LATENCY_ROW = ("turn latency", "latency_s", 1)


def fire_emulated(env: Environment, timings: Mapping[str, Any], generated: int) -> None:
    """One EMU request event per emulated timing of an answered turn."""
    for name, field, min_tokens in (*EMU_ROWS, LATENCY_ROW):
        value = timings.get(field)
        if generated < min_tokens or not isinstance(value, int | float):
            continue
        request: Any = env.events.request  # EventHook.fire is untyped
        request.fire(
            request_type=EMU,
            name=name,
            response_time=float(value) * 1000.0,
            response_length=0,
            exception=None,
            context={},
            response=None,
            url=None,
            start_time=time.time(),
        )


def summaries(stats: RequestStats, slo_ttft_s: float, slo_tpot_ms: float) -> dict[str, Summary]:
    limits = {"TTFT": slo_ttft_s * 1000.0, "TPOT": slo_tpot_ms}
    out: dict[str, Summary] = {}
    for name in ("TTFT", "TTST", "TPOT", LATENCY_ROW[0]):
        e = stats.entries.get((name, EMU))
        if e is None or not e.num_requests:
            continue
        limit = limits.get(name, math.inf)
        out[name] = Summary(
            n=e.num_requests,
            mean_ms=e.avg_response_time,
            p50_ms=e.get_response_time_percentile(0.5),
            p90_ms=e.get_response_time_percentile(0.9),
            p99_ms=e.get_response_time_percentile(0.99),
            max_ms=e.max_response_time,
            within=share_within({float(k): c for k, c in e.response_times.items()}, limit)
            if math.isfinite(limit)
            else 1.0,
        )
    return out


def slo_verdict(lg: Loadgen, *, final: bool) -> dict[str, Any] | None:
    """Print (and write) the verdict unless nothing changed since the last one."""
    plan = lg.plan
    if plan is None:
        return None
    rows = summaries(lg.env.stats, plan.slo_ttft_s, plan.slo_tpot_ms)
    seen = tuple(r.n for r in rows.values())
    if seen == lg.last_verdict_seen:
        return None
    lg.last_verdict_seen = seen
    extra = {
        "final": final,
        "arrivals": plan.arrivals,
        "aps": plan.aps if plan.arrivals == "poisson" else None,
        "dialect": lg.opts.dialect,
        "dilation": lg.dilation,
        "sessions": {"started": lg.started, "finished": lg.done, "failed": lg.failed},
        "requests_failed": lg.env.stats.total.num_failures,
        "tokens": _tokens(lg),
    }
    v = verdict(rows, plan.slo_ttft_s, plan.slo_tpot_ms, extra)
    console_logger.info(describe(v))
    if lg.opts.slo_json:
        path = Path(lg.opts.slo_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, v)
    return v


def progress_record(lg: Loadgen, state: str) -> None:
    stats = lg.env.stats
    turns = stats.entries.get((LATENCY_ROW[0], EMU))
    bound = lg.bound() if lg.plan is not None and lg.workload is not None else None
    first_error: object = lg.first_error or lg.aborted or lg.broken
    if first_error is None and stats.errors:
        first_error = next(iter(stats.errors.values())).error
    record = {
        "state": state,
        "sessions_started": lg.started,
        "sessions_done": lg.done,
        "sessions_failed": lg.failed,
        "sessions_total": bound,
        "turns_done": turns.num_requests if turns is not None else 0,
        "turns_total": total_turns(lg.workload, bound) if bound and lg.workload else None,
        "failures": stats.total.num_failures,
        "tokens": _tokens(lg),
        "first_error": None if first_error is None else str(first_error),
        "dilation": lg.dilation,
        "wall_first": lg.wall_first,  # time.perf_counter(): system-wide monotonic on Linux
        "wall_last": lg.wall_last,
    }
    path = Path(lg.opts.progress_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)


def _tokens(lg: Loadgen) -> dict[str, Any]:
    """Prompt tokens answered and the share read from the KV store (prefix reuse)."""
    prompt, cached = lg.tokens["prompt"], lg.tokens["cached"]
    return {"prompt": prompt, "cached": cached, "hit_rate": cached / prompt if prompt else 0.0}


def detect_dilation(host: str | None) -> float:
    """The cluster's `dualpath_dilation` gauge from HOST/metrics (1.0 if unreadable)."""
    import requests  # Locust's own dependency; gevent-patched in this process

    url = f"{(host or '').rstrip('/')}/metrics"
    try:
        text = requests.get(url, timeout=5).text
        line = next(ln for ln in text.splitlines() if ln.startswith("dualpath_dilation "))
        return float(line.split()[1])
    except (requests.RequestException, StopIteration, ValueError, IndexError):
        log.warning("could not read dualpath_dilation from %s; assuming 1.0 (--speedup)", url)
        return 1.0
