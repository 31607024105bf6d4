"""Front-door Prometheus metrics, under vLLM's names so existing dashboards work.

Latencies are *emulated* seconds (what the modelled cluster would show), not wall time.
`vllm:time_per_output_token_seconds` gets one observation per request: its mean gap over
the tokens after the second (requests with fewer than 3 tokens have none).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dualpath.frontdoor.backend import TurnResult

# 1 ms … 60 s, then a tail for overloaded runs (a TTFT SLO miss is still a data point).
SECONDS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 4.0, 5.0, 7.5, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0,
)  # fmt: skip
TOKENS = tuple(float(4**k) for k in range(11))  # 1 … ~1M tokens


class FrontDoorMetrics:
    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self.model = model
        label = ["model_name"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, label, buckets=buckets, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, label, registry=registry)

        self.ttft = hist("vllm:time_to_first_token_seconds", "Emulated TTFT", SECONDS)
        self.tpot = hist("vllm:time_per_output_token_seconds", "Emulated TPOT", SECONDS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Emulated latency", SECONDS)
        self.prompt_hist = hist("vllm:request_prompt_tokens", "Prompt tokens", TOKENS)
        self.gen_hist = hist("vllm:request_generation_tokens", "Generated tokens", TOKENS)
        self.prompt_total = counter("vllm:prompt_tokens", "Prompt tokens processed")
        self.gen_total = counter("vllm:generation_tokens", "Tokens generated")
        self.hits = counter("vllm:prefix_cache_hits", "Prompt tokens read from the KV store")
        self.queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up")
        self.running = Gauge(
            "vllm:num_requests_running", "Turns in flight", label, registry=registry
        ).labels(model)
        self.http = Counter(
            "dualpath_http_requests", "HTTP requests", ["endpoint", "code"], registry=registry
        )

    def observe(self, result: TurnResult) -> None:
        t = timings(result)
        m = self.model
        self.ttft.labels(m).observe(t["ttft_s"])
        if result.generated_tokens >= 3:
            self.tpot.labels(m).observe(t["tpot_s"])
        self.e2e.labels(m).observe(t["latency_s"])
        self.prompt_hist.labels(m).observe(result.prompt_tokens)
        self.gen_hist.labels(m).observe(result.generated_tokens)
        self.prompt_total.labels(m).inc(result.prompt_tokens)
        self.gen_total.labels(m).inc(result.generated_tokens)
        self.hits.labels(m).inc(result.cached_tokens)
        self.queries.labels(m).inc(result.prompt_tokens)


def timings(r: TurnResult) -> dict[str, float]:
    """TTFT, TTST (0 if < 2 tokens), TPOT over the tokens after the second (0 if < 3)."""
    n = r.generated_tokens
    return {
        "ttft_s": r.first_token_s - r.arrival_s,
        "ttst_s": r.second_token_s - r.first_token_s if n >= 2 else 0.0,
        "tpot_s": (r.last_token_s - r.second_token_s) / (n - 2) if n >= 3 else 0.0,
        "latency_s": r.last_token_s - r.arrival_s,
    }
