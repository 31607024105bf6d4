"""vLLM metric parity on a real local cluster (docs/monitoring.md, "vLLM's metrics").

A smoke cluster serves agent turns; then every service's /metrics is scraped and checked
against vLLM 0.33.0's definitions (names, types, buckets, labels) and against what the turns
did, with invariants that hold exactly: one success per completed turn, the engines' step
tokens add up to the prompt tokens computed plus the tokens generated, the inter-token gaps
to the decode times, and queue + prefill + decode to the end-to-end latency.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from dualpath.model.entities import steps
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions
from tests.runtimes.process.serving.conftest import scenario

GENS = (1, 2, 40)  # 1 and 2 tokens: no decode step, one decode step
SESSIONS = 3
Sample = tuple[str, dict[str, str], float]


def _turn(addr: str, session: str, gen: int) -> dict[str, Any]:
    body = json.dumps({"session": session, "append_tokens": 1500, "gen_tokens": gen}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/agent/turn", data=body)
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        out: dict[str, Any] = json.loads(resp.read())
        return out


def _scrape(addr: str) -> tuple[list[Sample], dict[str, str]]:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("vllm:"):
            m = re.fullmatch(r"([\w:]+)(?:\{(.*)\})? (\S+)", line)
            assert m, line
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            samples.append((m.group(1), labels, float(m.group(3))))
    return samples, types


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, list[Any]]]:
    cl = LocalCluster(scenario(agents=1), UpOptions(tmp_path_factory.mktemp("vllm"), http_port=0))
    try:
        cl.start()

        def session(i: int) -> list[dict[str, Any]]:
            return [_turn(cl.http_addr, f"s{i}", gen) for gen in GENS]

        with ThreadPoolExecutor(SESSIONS) as pool:
            results = [r for rs in pool.map(session, range(SESSIONS)) for r in rs]
        yield cl, results
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def scraped(run: tuple[LocalCluster, list[Any]]) -> tuple[list[Sample], dict[str, str]]:
    cl, _ = run
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for m in cl.members:
        got, kinds = _scrape(m.admin_addr)
        samples += got
        types.update(kinds)
    return samples, types


def _total(samples: list[Sample], name: str, **match: str) -> float:
    return sum(v for n, lab, v in samples if n == name and match.items() <= lab.items())


def test_names_types_and_labels_are_vllms(scraped: tuple[list[Sample], dict[str, str]]) -> None:
    samples, types = scraped
    want = {
        "vllm:request_success_total": "counter",
        "vllm:num_preemptions_total": "counter",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram",
        "vllm:request_decode_time_seconds": "histogram",
        "vllm:iteration_tokens_total": "histogram",
        "vllm:request_inference_time_seconds": "histogram",
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
    }
    for name, kind in want.items():
        assert types.get(name) == kind, f"{name}: type {types.get(name)}, vLLM's is {kind}"
    for name, labels, _ in samples:
        extra = {"le"} if name.endswith("_bucket") else set()
        if name.startswith("vllm:request_success"):
            extra = {"finished_reason"}
        assert set(labels) == {"model_name", "engine"} | extra, (name, labels)
        assert labels["model_name"] == "ds-27b"


def test_buckets_are_vllms(scraped: tuple[list[Sample], dict[str, str]]) -> None:
    samples, _ = scraped
    for name, bounds in (
        ("vllm:iteration_tokens_total", steps.ITERATION_TOKENS),
        ("vllm:inter_token_latency_seconds", steps.INTER_TOKEN_LATENCY),
        ("vllm:request_queue_time_seconds", steps.REQUEST_LATENCY),
        ("vllm:request_prefill_time_seconds", steps.REQUEST_LATENCY),
        ("vllm:request_decode_time_seconds", steps.REQUEST_LATENCY),
        ("vllm:e2e_request_latency_seconds", steps.REQUEST_LATENCY),
        ("vllm:request_inference_time_seconds", steps.REQUEST_LATENCY),
        ("vllm:request_time_per_output_token_seconds", steps.INTER_TOKEN_LATENCY),
        ("vllm:time_to_first_token_seconds", steps.TIME_TO_FIRST_TOKEN),
    ):
        les = {lab["le"] for n, lab, _ in samples if n == f"{name}_bucket"}
        assert les == {repr(float(b)) for b in bounds} | {"+Inf"}, name


def test_values_follow_from_the_turns(
    run: tuple[LocalCluster, list[Any]], scraped: tuple[list[Sample], dict[str, str]]
) -> None:
    _, results = run
    samples, _ = scraped
    assert len(results) == SESSIONS * len(GENS)
    # one success per completed turn, all at their max_tokens, labelled with their DE
    assert _total(samples, "vllm:request_success_total") == len(results)
    assert _total(samples, "vllm:request_success_total", finished_reason="length") == len(results)
    for r in results:
        assert _total(samples, "vllm:request_success_total", engine=r["engine"]) > 0
    # every step's tokens: the prompt tokens prefilled (not read from the store) + generated
    computed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in results)
    generated = sum(r["generated_tokens"] for r in results)
    assert sum(r["cached_tokens"] for r in results) > 0  # later turns hit the store
    assert _total(samples, "vllm:iteration_tokens_total_sum") == computed + generated
    # one gap per token after the first; the gaps add up to the decode times
    assert _total(samples, "vllm:inter_token_latency_seconds_count") == generated - len(results)
    itl = _total(samples, "vllm:inter_token_latency_seconds_sum")
    decode = _total(samples, "vllm:request_decode_time_seconds_sum")
    assert math.isclose(itl, decode, rel_tol=1e-6), (itl, decode)
    assert decode == pytest.approx(sum(r["latency_s"] - r["ttft_s"] for r in results), rel=1e-6)
    # queue + prefill + decode = e2e, each turn; each phase took time
    queue = _total(samples, "vllm:request_queue_time_seconds_sum")
    prefill = _total(samples, "vllm:request_prefill_time_seconds_sum")
    e2e = _total(samples, "vllm:e2e_request_latency_seconds_sum")
    assert queue > 0 and prefill > 0 and decode > 0
    assert math.isclose(queue + prefill + decode, e2e, rel_tol=1e-6)
    inference = _total(samples, "vllm:request_inference_time_seconds_sum")
    assert math.isclose(inference, prefill + decode, rel_tol=1e-6)
    assert queue + prefill == pytest.approx(sum(r["ttft_s"] for r in results), rel=1e-6)
    for phase in ("queue", "prefill", "decode"):
        count = _total(samples, f"vllm:request_{phase}_time_seconds_count")
        assert count == len(results), phase
    # nothing was preempted, and every engine says so
    preempt = [(lab["engine"], v) for n, lab, v in samples if n == "vllm:num_preemptions_total"]
    assert preempt and all(v == 0 for _, v in preempt)
    engines = {e for e, _ in preempt}
    assert {r["engine"] for r in results} <= engines


def test_router_scrape_under_load(run: tuple[LocalCluster, list[Any]]) -> None:
    """What a KV-aware router polls: running, waiting and KV usage per engine, while turns
    are in flight. Prints the busiest scrape (pytest -s)."""
    cl, _ = run
    nodes = [m for m in cl.members if m.name not in ("scheduler", "storage")]
    stop = threading.Event()

    def load(i: int) -> None:
        for t in range(2):
            if not stop.is_set():
                _turn(cl.http_addr, f"load{i}", 200 + 50 * t)

    peak: dict[str, tuple[float, float, float]] = {}
    scrapes = 0
    took: list[float] = []  # wall seconds per node scrape
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(load, i) for i in range(12)]
        deadline = time.monotonic() + 60
        while not all(f.done() for f in futures) and time.monotonic() < deadline:
            t0 = time.perf_counter()
            for m in nodes:
                t1 = time.perf_counter()
                samples, _ = _scrape(m.admin_addr)
                took.append(time.perf_counter() - t1)
                for name, lab, v in samples:
                    old = peak.get(lab["engine"], (0.0, 0.0, -1.0))  # -1: no KV gauge (PE)
                    idx = {
                        "vllm:num_requests_running": 0,
                        "vllm:num_requests_waiting": 1,
                        "vllm:kv_cache_usage_perc": 2,
                    }.get(name)
                    if idx is not None and v > old[idx]:
                        peak[lab["engine"]] = tuple(  # type: ignore[assignment]
                            v if k == idx else old[k] for k in range(3)
                        )
            scrapes += 1
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))
        stop.set()
        for f in futures:
            f.result()
    took.sort()
    print(
        f"\n{scrapes} router scrapes of {len(nodes)} nodes, one node's /metrics in "
        f"{1e3 * took[len(took) // 2]:.1f} ms median, {1e3 * took[-1]:.1f} ms max; peak per engine:"
    )
    for eid, (running, waiting, kv) in sorted(peak.items()):
        usage = f"{kv:.4f}" if kv >= 0 else "n/a (prefill engine)"
        print(f"  {eid}: running {running:.0f}, waiting {waiting:.0f}, KV usage {usage}")
    assert scrapes >= 3
    assert max(p[0] for p in peak.values()) >= 2  # a DE batched several turns
    assert max(p[2] for p in peak.values()) > 0
