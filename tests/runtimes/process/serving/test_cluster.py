"""Integration: real service processes, real gRPC, a real Redis, the official OpenAI client.

Tests in this module share one cluster and run in file order; the last one kills a node.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
import redis.asyncio as aioredis

from dualpath.runtimes.process.control import Registry
from dualpath.runtimes.process.launcher.collect import gather_stats
from dualpath.runtimes.process.launcher.local import LocalCluster
from tests.polling import wait_until

SYSTEM = " ".join(f"rule{i} keep the tool outputs short and cite the file" for i in range(60))


def _get(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as err:  # 503 = degraded or failed: the body says why
        body = json.load(err)
    return body


async def _post_turn(cluster: LocalCluster, body: dict[str, Any]) -> tuple[int, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        url = f"http://{cluster.http_addr}/v1/agent/turn"
        async with http.post(url, json=body) as resp:
            return resp.status, await (resp.json() if resp.status == 200 else resp.text())


async def _agent_turn(cluster: LocalCluster, body: dict[str, Any]) -> dict[str, Any]:
    status, result = await _post_turn(cluster, body)
    assert status == 200, result
    return dict(result)


def _stored_blocks(cl: LocalCluster) -> int:
    storage = {"storage": cl.grpc_addrs()["storage"]}
    return int(asyncio.run(gather_stats(storage))[0]["store"]["stored_blocks"])


def _wait_persisted(
    cl: LocalCluster, before: int, prompt: int, generated: int, cached: int
) -> None:
    """The decode engine persists a turn's last filled blocks after its reply has gone out,
    and the next turn hits only what the store holds: wait until the store has this turn's
    own blocks (its filled blocks past the prefix it shared, i.e. its hit)."""
    bt = cl.sc.engine.block_tokens
    filled = (prompt + generated - 1) // bt  # the newest token has no KV yet
    want = before + filled - cached // bt
    wait_until(
        lambda: _stored_blocks(cl) >= want, timeout=15, what=f"the store to hold {want} blocks"
    )


def _stats(cl: LocalCluster) -> dict[str, dict[str, Any]]:
    return {s["service"]: s for s in asyncio.run(gather_stats(cl.grpc_addrs()))}


def test_every_service_is_registered_healthy_and_serves_metrics(cluster: LocalCluster) -> None:
    names = sorted(m.name for m in cluster.members)
    assert names == ["decode0", "prefill0", "scheduler", "storage"]
    for m in cluster.members:
        assert _get(f"http://{m.admin_addr}/healthz")["ready"] is True
        with urllib.request.urlopen(f"http://{m.admin_addr}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "dualpath_emulation_lag_seconds" in text
    node = next(m for m in cluster.members if m.name == "decode0")
    with urllib.request.urlopen(f"http://{node.admin_addr}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert 'dualpath_link_bytes_total{link="decode0.snic.rx"' in text or "decode0" in text


def test_openai_client_streams_and_second_turn_hits_cache(cluster: LocalCluster) -> None:
    client = openai.OpenAI(base_url=f"http://{cluster.http_addr}/v1", api_key="x", max_retries=0)
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "list the files"},
    ]
    before = _stored_blocks(cluster)
    stream = client.chat.completions.create(
        model="ds-27b",
        messages=messages,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        user="alice",
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    first_usage = chunks[-1].usage
    assert first_usage is not None and first_usage.completion_tokens == 8
    assert first_usage.prompt_tokens_details is not None
    first_cached = first_usage.prompt_tokens_details.cached_tokens or 0
    messages += [
        {"role": "assistant", "content": text},
        {"role": "user", "content": "now open the first one"},
    ]
    _wait_persisted(
        cluster, before, first_usage.prompt_tokens, first_usage.completion_tokens, first_cached
    )
    second = client.chat.completions.create(
        model="ds-27b", messages=messages, max_tokens=4, user="alice"
    )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert cached >= 64, f"second turn should hit the first turn's blocks, got {cached}"
    assert cached < second.usage.prompt_tokens


def test_agent_turns_use_both_read_paths_and_verify_every_block(cluster: LocalCluster) -> None:
    async def turns() -> list[dict[str, Any]]:
        import aiohttp

        out = []
        async with aiohttp.ClientSession() as http:
            for agent in range(2):
                for turn in range(3):
                    body = {"session": f"it-{agent}", "append_tokens": 300, "gen_tokens": 20}
                    url = f"http://{cluster.http_addr}/v1/agent/turn"
                    async with http.post(url, json=body) as resp:
                        assert resp.status == 200, await resp.text()
                        out.append(await resp.json())
                    assert out[-1]["turn"] == turn
        return out

    results = asyncio.run(turns())
    assert {r["read_path"] for r in results} == {"pe", "de"}
    stats = _stats(cluster)
    integ = stats["scheduler"]["metrics"]["integrity"]
    assert integ["blocks_read"] > 0 and integ["bytes_from_storage"] > 0
    assert integ["blocks_lost"] == integ["blocks_corrupted"] == 0
    pe_loaded = stats["prefill0"]["metrics"]["integrity"]["bytes_to_prefill_hbm"]
    assert pe_loaded == pytest.approx(integ["bytes_from_storage"])
    assert stats["storage"]["metrics"]["integrity"]["blocks_persisted"] > 0
    assert stats["storage"]["store"]["corrupted"] == 0


def test_prefixes_are_shared_across_users_by_content(cluster: LocalCluster) -> None:
    """Three users send the same 6,018-token system prompt: the second and third read it
    from storage (content addressing, as vLLM's prefix caching), and a prompt whose last
    block differs still hits every block before it."""
    client = openai.OpenAI(base_url=f"http://{cluster.http_addr}/v1", api_key="x", max_retries=0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    system = "".join(f" {words[i % len(words)]}" for i in range(6018))
    cached = []
    for user, task in (("u1", "fix the parser"), ("u2", "add a test"), ("u3", "write docs")):
        before = _stored_blocks(cluster)
        r = client.chat.completions.create(
            model="ds-27b",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": task}],
            max_tokens=2,
            user=user,
        )
        assert r.usage is not None and r.usage.prompt_tokens_details is not None
        cached.append(r.usage.prompt_tokens_details.cached_tokens or 0)
        _wait_persisted(
            cluster, before, r.usage.prompt_tokens, r.usage.completion_tokens, cached[-1]
        )
    assert cached[0] == 0
    assert cached[1] >= 64 * 93 and cached[2] >= 64 * 93, cached

    async def turn(ids: list[int]) -> dict[str, Any]:

        body = {
            "session": f"ids-{ids[-1]}",
            "prompt_tokens": 64 * 94 + 10,
            "block_ids": ids,
            "block_tokens": 64,
            "gen_tokens": 2,
        }
        return await _agent_turn(cluster, body)

    ids = list(range(1000, 1094))
    before = _stored_blocks(cluster)
    first = asyncio.run(turn(ids))
    assert first["cached_tokens"] == 0
    _wait_persisted(cluster, before, first["prompt_tokens"], first["generated_tokens"], 0)
    assert asyncio.run(turn([*ids[:93], 5]))["cached_tokens"] == 64 * 93  # all but the last


def test_storage_restart_keeps_every_block_through_the_redis_index(cluster: LocalCluster) -> None:
    before = _stats(cluster)["storage"]["store"]
    assert before["stored_blocks"] > 0
    cluster.group.restart("storage")

    def storage_ready() -> bool:
        cluster.group.check_alive()
        try:
            cluster.members = asyncio.run(_members(cluster))
            storage = next(m for m in cluster.members if m.name == "storage")
            return bool(_get(f"http://{storage.admin_addr}/healthz")["ready"])
        except (StopIteration, OSError):
            return False

    wait_until(storage_ready, timeout=30, interval=0.25, what="the restarted storage ready")
    after = _stats(cluster)["storage"]["store"]
    assert after["restored_blocks"] == before["stored_blocks"] == after["stored_blocks"]

    def one_turn() -> dict[str, Any] | None:
        """A turn, or None while a service still calls the old storage address (each one
        reads the registry every TTL/2 and then calls the new one)."""
        body = {"session": "it-0", "append_tokens": 100, "gen_tokens": 4}
        status, result = asyncio.run(_post_turn(cluster, body))
        return dict(result) if status == 200 else None

    served = wait_until(one_turn, timeout=15, interval=0.25, what="a turn after the restart")
    assert served["cached_tokens"] > 0  # served from the restored blocks


async def _members(cluster: LocalCluster) -> list[Any]:
    r = aioredis.Redis.from_url(cluster.redis_url)
    try:
        return await Registry(r, cluster.run_id).members()
    finally:
        await r.aclose()


def test_killed_node_expires_from_registry_and_the_rest_stop_gracefully(
    cluster: LocalCluster,
) -> None:
    victim = next(p for p in cluster.group.procs if p.name == "decode0")
    os.killpg(victim.popen.pid, signal.SIGKILL)
    victim.popen.wait(timeout=10)

    async def live_names() -> list[str]:
        r = aioredis.Redis.from_url(cluster.redis_url)
        try:
            return sorted(m.name for m in await Registry(r, cluster.run_id).members())
        finally:
            await r.aclose()

    wait_until(
        lambda: "decode0" not in asyncio.run(live_names()),
        timeout=15,
        interval=0.25,
        what="decode0's registry entry to expire",
    )
    wait_until(
        lambda: "decode0" in _get(f"http://{cluster.http_addr}/healthz")["lost"],
        timeout=10,
        interval=0.25,
        what="the scheduler to notice the lost node",
    )
    ports = [int(m.grpc_addr.rsplit(":", 1)[1]) for m in cluster.members if m.name != "decode0"]
    killed = cluster.group.stop(grace_s=15)
    assert killed == [], f"needed SIGKILL after SIGTERM: {killed}"
    for port in ports:
        with socket.socket() as s:
            # SO_REUSEADDR ignores TIME_WAIT leftovers but still fails if anyone listens
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
