"""The native agent endpoint, /healthz and /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import ClientSession
from prometheus_client.parser import text_string_to_metric_families

from dualpath.runtimes.process.frontdoor import NATIVE_SESSION_BASE, BackendBusy
from tests.polling import wait_until_async
from tests.runtimes.process.frontdoor.conftest import MAX_GEN, MAX_PROMPT, MODEL, Server

pytestmark = pytest.mark.asyncio


async def _turn(http: ClientSession, status: int = 200, **body: Any) -> Any:
    async with http.post("/v1/agent/turn", json=body) as r:
        assert r.status == status, await r.text()
        return await r.json()


async def test_agent_context_grows_with_the_history(http: ClientSession, server: Server) -> None:
    t0 = await _turn(http, session="agent-a", append_tokens=100, gen_tokens=10)
    t1 = await _turn(http, session="agent-a", append_tokens=50, gen_tokens=5, turn=1)
    other = await _turn(http, session="agent-b", append_tokens=8, gen_tokens=1)
    assert t0["session"] == t1["session"] >= NATIVE_SESSION_BASE
    assert other["session"] != t0["session"]
    assert (t0["turn"], t0["prompt_tokens"]) == (0, 100)
    assert (t1["turn"], t1["prompt_tokens"]) == (1, 100 + 10 + 50)
    assert t1["cached_tokens"] == 100  # the fake saw 25 blocks of 4 tokens
    assert t1["session_key"] == "agent-a"
    assert t1["ttft_s"] == pytest.approx(0.25) and t1["tpot_s"] == pytest.approx(0.02)
    assert other["ttst_s"] == 0.0 and other["read_path"] in {"pe", "de"}
    assert server.backend.specs[1].prompt_tokens == 160


async def test_block_ids_are_content_addressed_across_sessions(
    http: ClientSession, server: Server
) -> None:
    """A trace's hash_ids: two sessions sharing leading ids share those blocks (a fork),
    and a session whose next prompt extends its ids stays on its chain."""
    body = {"block_tokens": 8, "gen_tokens": 2}  # 8-token ids = two 4-token cluster blocks
    a0 = await _turn(http, session="a", prompt_tokens=30, block_ids=[1, 2, 3, 4], **body)
    b0 = await _turn(http, session="b", prompt_tokens=20, block_ids=[1, 2, 9], **body)
    a1 = await _turn(http, session="a", prompt_tokens=40, block_ids=[1, 2, 3, 4, 5], **body)
    assert b0["session"] != a0["session"] == a1["session"] and a1["turn"] == 1
    fork = server.backend.specs[1].lineage
    assert [(f.session, f.parent, f.at) for f in fork] == [(b0["session"], a0["session"], 4)]
    assert server.backend.specs[0].prompt_tokens == 30 and a0["prompt_tokens"] == 30


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt_tokens": 8, "block_ids": [1], "block_tokens": 6}, "block_tokens"),
        ({"prompt_tokens": 8, "block_ids": [1, 2, 3], "block_tokens": 4}, "block_ids"),
        ({"prompt_tokens": 8, "block_ids": ["x"], "block_tokens": 4}, "block_ids"),
        ({"prompt_tokens": 8, "block_ids": {"a": 1}}, "block_ids"),
        ({"prompt_tokens": 0, "block_ids": []}, "prompt_tokens"),
        ({"prompt_tokens": MAX_PROMPT + 1, "block_ids": []}, "prompt_tokens"),
        ({"prompt_tokens": 8, "block_ids": [1], "append_tokens": 3}, "append_tokens"),
    ],
)
async def test_block_id_validation(http: ClientSession, body: Any, param: str) -> None:
    err = (await _turn(http, 400, session="s", gen_tokens=1, **body))["error"]
    assert err["param"] == param


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"append_tokens": 1, "gen_tokens": 1}, 400, "session"),
        ({"session": "", "append_tokens": 1, "gen_tokens": 1}, 400, "session"),
        ({"session": "x" * 129, "append_tokens": 1, "gen_tokens": 1}, 400, "session"),
        ({"session": "s", "append_tokens": 0, "gen_tokens": 1}, 400, "append_tokens"),
        ({"session": "s", "gen_tokens": 1}, 400, "append_tokens"),
        ({"session": "s", "append_tokens": 1, "gen_tokens": MAX_GEN + 1}, 400, "gen_tokens"),
        ({"session": "s", "append_tokens": 1, "gen_tokens": 1, "turn": "0"}, 400, "turn"),
        ({"session": "s", "append_tokens": 1, "gen_tokens": 1, "turn": 3}, 409, "turn"),
        ({"session": "s", "append_tokens": MAX_PROMPT + 1, "gen_tokens": 1}, 400, "append_tokens"),
    ],
)
async def test_agent_validation(http: ClientSession, body: Any, status: int, param: str) -> None:
    err = (await _turn(http, status, **body))["error"]
    assert err["param"] == param


async def test_agent_refused_turn_does_not_advance(http: ClientSession, server: Server) -> None:
    server.backend.fail = BackendBusy("full")
    await _turn(http, 429, session="s", append_tokens=10, gen_tokens=2, turn=0)
    server.backend.fail = None
    ok = await _turn(http, session="s", append_tokens=10, gen_tokens=2, turn=0)
    assert ok["prompt_tokens"] == 10


async def test_agent_concurrent_turn_of_one_session_is_409(
    http: ClientSession, server: Server
) -> None:
    server.backend.gate = asyncio.Event()
    body = {"session": "s", "append_tokens": 4, "gen_tokens": 2}
    held = asyncio.create_task(http.post("/v1/agent/turn", json=body))
    await wait_until_async(lambda: server.backend.specs, 5, 0.001, what="the held turn running")
    err = (await _turn(http, 409, **body))["error"]
    assert err["param"] == "session"
    server.backend.gate.set()
    async with await held as r:
        assert r.status == 200


async def test_health(http: ClientSession) -> None:
    async with http.get("/healthz") as r:
        assert r.status == 200
        assert await r.json() == {"status": "ok", "backend": "fake"}


async def test_metrics_after_a_request(http: ClientSession) -> None:
    body = {"model": MODEL, "prompt": "one two three four five", "max_tokens": 4}
    for _ in range(2):
        async with http.post("/v1/completions", json=body) as r:
            assert r.status == 200
    async with http.get("/v1/nope") as r:
        assert r.status == 404
    async with http.get("/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    # the fake backend does not name its engine: vLLM's single engine core, "0"
    label = (("engine", "0"), ("model_name", MODEL))
    length = (("engine", "0"), ("finished_reason", "length"), ("model_name", MODEL))
    assert samples[("vllm:request_success_total", length)] == 2
    for phase in ("queue", "prefill", "decode"):
        assert samples[(f"vllm:request_{phase}_time_seconds_count", label)] == 2
    assert samples[("vllm:time_to_first_token_seconds_count", label)] == 2
    assert samples[("vllm:time_per_output_token_seconds_count", label)] == 2
    assert samples[("vllm:e2e_request_latency_seconds_count", label)] == 2
    assert samples[("vllm:request_prompt_tokens_count", label)] == 2
    assert samples[("vllm:request_generation_tokens_sum", label)] == 8
    assert samples[("vllm:generation_tokens_total", label)] == 8
    prompt = samples[("vllm:prompt_tokens_total", label)]
    assert samples[("vllm:prefix_cache_queries_total", label)] == prompt
    assert 0 < samples[("vllm:prefix_cache_hits_total", label)] < prompt
    assert samples[("dualpath_frontdoor_turns_running", (("model_name", MODEL),))] == 0
    ok = (("code", "200"), ("endpoint", "/v1/completions"))
    assert samples[("dualpath_http_requests_total", ok)] == 2
    assert samples[("dualpath_http_requests_total", (("code", "404"), ("endpoint", "unmatched")))]
