"""The control plane through a Redis outage: a killed, restarted or hung (SIGSTOPped) real
redis-server. Each test owns its server, so stopping it disturbs no other test."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import psutil
import pytest
import pytest_asyncio
from redis.asyncio import Redis

from dualpath.runtimes.process.control import (
    BlockIndex,
    EventLog,
    Heartbeat,
    Member,
    MembershipWatch,
    Outage,
    RedisServer,
    Registry,
    make_client,
)
from tests.polling import wait_until_async


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest_asyncio.fixture
async def r(server: RedisServer) -> AsyncIterator[Redis]:
    # long socket timeout on purpose: the control plane's own deadlines must bound calls
    client = make_client(server.url, op_timeout_s=5.0)
    yield client
    await client.aclose()


@pytest.fixture
def run_id() -> str:
    return f"o-{uuid.uuid4().hex[:12]}"


def is_down(outage: Outage) -> bool:
    """A call, not an attribute read: mypy must not narrow it across awaits."""
    return outage.down


def member(name: str) -> Member:
    return Member("decode", name, "127.0.0.1:1", "127.0.0.1:2")


def restart_on_same_port(server: RedisServer) -> RedisServer:
    port = server.port
    os.kill(server.pid, signal.SIGKILL)
    server.stop()
    return RedisServer(port=port)


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_heartbeat_keeps_its_pace_while_redis_hangs(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    reg = Registry(r, run_id, ttl_s=0.9)
    beat = Heartbeat(reg, member("decode0"), interval_s=0.3)
    beat.start()
    await reg.wait_for({"decode": 1}, timeout_s=3)
    os.kill(server.pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        # every beat gives up after its deadline (0.3 s), not after the 5 s socket timeout
        # (one stuck call would leave a single attempt in flight for the whole stall)
        await wait_until_async(
            lambda: is_down(beat.outage) and beat.outage.failures >= 3,
            timeout=2.5,
            what="three beats given up within 2.5 s of Redis hanging",
        )
    finally:
        os.kill(server.pid, signal.SIGCONT)
    started = time.monotonic()
    while is_down(beat.outage):
        assert time.monotonic() - started < 0.9, "the heartbeat did not resume within the TTL"
        await asyncio.sleep(0.02)
    assert [m.name for m in await reg.members(timeout_s=1)] == ["decode0"]
    await beat.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_member_reregisters_on_a_restarted_empty_redis(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    reg = Registry(r, run_id, ttl_s=1.5)
    beat = Heartbeat(reg, member("decode0"))
    beat.start()
    await reg.wait_for({"decode": 1}, timeout_s=3)
    fresh = restart_on_same_port(server)
    await wait_until_async(
        lambda: is_down(beat.outage), timeout=5, what="the beat to see Redis gone"
    )
    assert beat.running
    fresh.start()
    try:
        started = time.monotonic()
        await reg.wait_for({"decode": 1}, timeout_s=3)
        assert time.monotonic() - started < 1.5  # within one TTL
        await beat.stop()
    finally:
        fresh.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_event_buffer_drops_oldest_while_redis_is_down_then_resumes(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    log = EventLog(r, run_id, "scheduler")
    buf = log.buffer(max_records=5)
    await buf.emit("tick", 0.0, i=0)
    assert await buf.flush() == 1
    fresh = restart_on_same_port(server)
    for i in range(1, 13):
        await buf.emit("tick", float(i), i=i)  # never raises, never blocks for long
    assert await buf.flush() == 0 and is_down(buf.outage)
    assert (len(buf), buf.dropped) == (5, 7)
    fresh.start()
    try:
        assert await buf.flush(force=True) == 5
        assert not is_down(buf.outage)
        assert [x["i"] for x in await log.read_all()] == [8, 9, 10, 11, 12]
        await buf.close()
    finally:
        fresh.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_block_index_writes_behind_and_refills_a_restarted_redis(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    idx = BlockIndex(r, run_id)
    assert await idx.record_many([(1, 4), (2, 6)]) == 2
    await idx.record_forks([(2, 1, 3)])
    fresh = restart_on_same_port(server)
    assert await idx.record_many([(3, 9), (1, 5)]) == 0  # kept, not raised
    await idx.record_forks([(3, 2, 4)])
    assert idx.pending > 0 and is_down(idx.outage)
    fresh.start()
    try:
        started = time.monotonic()
        while idx.pending or is_down(idx.outage):  # the background retry, no new write needed
            assert time.monotonic() - started < 5, "the block index did not catch up"
            await asyncio.sleep(0.05)
        reader = BlockIndex(r, run_id)
        assert await reader.load() == {1: 5, 2: 6, 3: 9}  # the old Redis's entries too
        assert sorted(await reader.load_forks()) == [(2, 1, 3), (3, 2, 4)]
        await idx.close()
    finally:
        fresh.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_storage_commits_say_no_while_redis_is_away_and_yes_once_it_has_everything(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    """runtimes/process/serving/commit.py: the storage acknowledges a write only after a commit
    round said
    its index entry is in Redis; a round Redis did not take says no (the write is refused
    and sent again), and a later round says yes once the index caught up."""
    from dualpath.runtimes.process.serving.commit import IndexCommits

    commits = IndexCommits(BlockIndex(r, run_id))
    commits.mark(1, 93, {(2, 1, 10)})
    assert await commits.commit() and commits.durable == {1: 93}
    fresh = restart_on_same_port(server)
    commits.mark(1, 95, set())
    commits.mark(2, 12, set())
    assert not await commits.commit()  # refused: the writes answer UNAVAILABLE
    assert commits.durable == {1: 93}
    fresh.start()
    try:
        await wait_until_async(commits.commit, timeout=5, what="a commit round to say yes")
        assert commits.durable == {1: 95, 2: 12}
        reader = BlockIndex(r, run_id)  # what a restarted storage reads back
        assert await reader.load() == {1: 95, 2: 12}
        assert await reader.load_forks() == [(2, 1, 10)]
        await commits.index.close()
    finally:
        fresh.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_membership_watch_keeps_the_last_read_and_settles_after_an_outage(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    reg = Registry(r, run_id, ttl_s=3.0)
    delivered: list[list[str]] = []
    watch = MembershipWatch(
        reg, lambda ms: delivered.append([m.name for m in ms]), 0.2, 0.5, settle_s=1.0
    )
    await reg.register(member("decode0"))
    assert await watch.poll() == 0.2 and delivered == [["decode0"]]
    fresh = restart_on_same_port(server)
    assert await watch.poll() <= 0.2
    assert is_down(watch.outage) and [m.name for m in watch.members] == ["decode0"]
    fresh.start()
    try:
        # a restarted Redis is empty until the members re-register: not trusted at once
        assert await watch.poll() == 1.0 and len(delivered) == 1
        assert await watch.poll() == 0.2 and delivered[-1] == []
    finally:
        fresh.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_wait_for_rides_out_a_redis_restart(
    r: Redis, server: RedisServer, run_id: str
) -> None:
    reg = Registry(r, run_id, ttl_s=3.0)
    fresh = restart_on_same_port(server)

    async def later() -> None:
        await asyncio.sleep(0.5)  # not a wait: Redis comes back while wait_for waits
        fresh.start()
        await reg.register(member("decode0"))

    try:
        got, _ = await asyncio.gather(reg.wait_for({"decode": 1}, timeout_s=5), later())
        assert [m.name for m in got] == ["decode0"]
    finally:
        fresh.stop()


@pytest.mark.timeout(30)
def test_guarded_child_dies_with_its_sigkilled_parent() -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    code = (
        "import subprocess, time\n"
        "from dualpath.runtimes.process.control.lifeline import guarded_argv\n"
        f"p = subprocess.Popen(guarded_argv([{sleep!r}, '60']))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"  # not a wait: the parent lives until the test kills it
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 5
        while child.cmdline()[:1] != [sleep]:  # the shim armed the signal, then exec'd
            assert time.monotonic() < deadline
            time.sleep(0.02)
        parent.kill()
        parent.wait(timeout=5)
        child.wait(timeout=5)  # psutil.TimeoutExpired if it outlived its parent
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=5)
        if child is not None and child.is_running():
            child.kill()
