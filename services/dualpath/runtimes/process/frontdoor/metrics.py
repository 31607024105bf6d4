"""Front-door Prometheus metrics, under vLLM's names, types, buckets and labels
(vllm/v1/metrics/loggers.py and buckets.py, vLLM 0.33.0) so dashboards built for vLLM work.

Latencies are *emulated* seconds (what the modelled cluster would show), not wall time.
Every series carries `model_name` and `engine`: the engine that finished the turn (our
engine id, where vLLM puts its engine index; "" for a turn aborted before it reached one).
Per turn, as vLLM defines them: queue = arrival -> its first prefill forward (vLLM counts an
asynchronous KV load as waiting: so do we, the storage read included), prefill = that
forward -> first token, decode = first -> last token, so queue + prefill + decode = e2e.
`vllm:time_per_output_token_seconds` gets one observation per request: its mean gap over
the tokens after the second (requests with fewer than 3 tokens have none); vLLM 0.33 dropped
that name for `vllm:inter_token_latency_seconds`, which the engines export per token.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dualpath.model.entities import steps
from dualpath.runtimes.process.frontdoor.backend import TurnResult

# vLLM's FinishReason strings; every turn ends at its max_tokens (no stop strings emulated)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
MAX_MODEL_LEN = 1 << 20  # caps the 1-2-5 token buckets, as vLLM's max_model_len does


class FrontDoorMetrics:
    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self.model = model
        label = ["model_name", "engine"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, label, buckets=buckets, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, label, registry=registry)

        latency, tokens = steps.REQUEST_LATENCY, steps.one_two_five(MAX_MODEL_LEN)
        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Emulated TTFT", steps.TIME_TO_FIRST_TOKEN
        )
        self.tpot = hist(
            "vllm:time_per_output_token_seconds", "Emulated TPOT", steps.INTER_TOKEN_LATENCY
        )
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Emulated latency", latency)
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival to first forward", latency)
        self.prefill = hist("vllm:request_prefill_time_seconds", "First forward to token", latency)
        self.decode = hist("vllm:request_decode_time_seconds", "First to last token", latency)
        self.inference = hist(
            "vllm:request_inference_time_seconds", "First forward to last token", latency
        )
        self.mean_itl = hist(
            "vllm:request_time_per_output_token_seconds",
            "Decode time / (generated - 1), per turn",
            steps.INTER_TOKEN_LATENCY,
        )
        self.prompt_hist = hist("vllm:request_prompt_tokens", "Prompt tokens", tokens)
        self.gen_hist = hist("vllm:request_generation_tokens", "Generated tokens", tokens)
        self.prompt_total = counter("vllm:prompt_tokens", "Prompt tokens processed")
        self.gen_total = counter("vllm:generation_tokens", "Tokens generated")
        self.hits = counter("vllm:prefix_cache_hits", "Prompt tokens read from the KV store")
        self.queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up")
        self.success = Counter(
            "vllm:request_success",
            "Turns finished, by vLLM finish reason",
            [*label, "finished_reason"],
            registry=registry,
        )
        # Turns in flight at the front door: not an engine's batch (the nodes export
        # vllm:num_requests_running per engine), so not under vLLM's name.
        self.running = Gauge(
            "dualpath_frontdoor_turns_running", "Turns in flight", ["model_name"], registry=registry
        ).labels(model)
        self.http = Counter(
            "dualpath_http_requests", "HTTP requests", ["endpoint", "code"], registry=registry
        )

    def observe(self, result: TurnResult) -> None:
        t = timings(result)
        lab = (self.model, result.engine)
        self.success.labels(*lab, "length").inc()
        self.ttft.labels(*lab).observe(t["ttft_s"])
        if result.generated_tokens >= 3:
            self.tpot.labels(*lab).observe(t["tpot_s"])
        self.e2e.labels(*lab).observe(t["latency_s"])
        queue, prefill, decode = phases(result)
        self.queue.labels(*lab).observe(queue)
        self.prefill.labels(*lab).observe(prefill)
        self.decode.labels(*lab).observe(decode)
        self.inference.labels(*lab).observe(prefill + decode)
        n = result.generated_tokens
        self.mean_itl.labels(*lab).observe(decode / (n - 1) if n > 1 else 0.0)  # as vLLM
        self.prompt_hist.labels(*lab).observe(result.prompt_tokens)
        self.gen_hist.labels(*lab).observe(result.generated_tokens)
        self.prompt_total.labels(*lab).inc(result.prompt_tokens)
        self.gen_total.labels(*lab).inc(result.generated_tokens)
        self.hits.labels(*lab).inc(result.cached_tokens)
        self.queries.labels(*lab).inc(result.prompt_tokens)

    def aborted(self) -> None:
        """A turn whose client hung up before it reached an engine (cancelled in the queue)."""
        self.success.labels(self.model, "", "abort").inc()


def timings(r: TurnResult) -> dict[str, float]:
    """TTFT, TTST (0 if < 2 tokens), TPOT over the tokens after the second (0 if < 3)."""
    n = r.generated_tokens
    return {
        "ttft_s": r.first_token_s - r.arrival_s,
        "ttst_s": r.second_token_s - r.first_token_s if n >= 2 else 0.0,
        "tpot_s": (r.last_token_s - r.second_token_s) / (n - 2) if n >= 3 else 0.0,
        "latency_s": r.last_token_s - r.arrival_s,
    }


def phases(r: TurnResult) -> tuple[float, float, float]:
    """vLLM's queue, prefill and decode times of a turn; they add up to its latency."""
    sched = r.arrival_s if r.scheduled_s is None else r.scheduled_s
    return sched - r.arrival_s, r.first_token_s - sched, r.last_token_s - r.first_token_s
