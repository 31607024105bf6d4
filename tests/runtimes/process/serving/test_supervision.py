"""The live cluster holds: Redis loss, a crashed service, a SIGKILLed launcher, and a
truthful /healthz. Real service processes on 127.0.0.1 and a real Redis; each test starts
its own cluster and stops every process it started."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis.asyncio as aioredis

from dualpath.runtimes.process.control import EventLog, Member, RedisServer, Registry
from dualpath.runtimes.process.launcher.local import LocalCluster
from dualpath.runtimes.process.launcher.procs import (
    ClusterStartError,
    Proc,
    ProcessGroup,
    Restart,
    RestartPolicy,
    failure_reason,
    log_tail,
)
from dualpath.runtimes.process.serving.service import Health, ServiceShell
from tests.polling import wait_until

TURN = {"session": "s", "append_tokens": 100, "gen_tokens": 4}


def _get(url: str) -> tuple[int, dict[str, Any]]:
    """GET a JSON health document, whatever the status code."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def _turn(cl: LocalCluster, session: str = "s") -> int:
    body = json.dumps({**TURN, "session": session}).encode()
    req = urllib.request.Request(
        f"http://{cl.http_addr}/v1/agent/turn",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _members(redis_url: str, run_id: str) -> list[Member]:
    async def read() -> list[Member]:
        r = aioredis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            return await Registry(r, run_id).members()
        finally:
            await r.aclose()

    return asyncio.run(read())


def _events(redis_url: str, run_id: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        r = aioredis.Redis.from_url(redis_url, socket_timeout=2)
        try:
            return await EventLog(r, run_id, "test").read_all()
        finally:
            await r.aclose()

    return asyncio.run(read())


def _wait(what: str, check: Any, timeout_s: float, poll_s: float = 0.1) -> float:
    """Poll `check()` until truthy; returns the seconds it took."""
    start = time.monotonic()
    wait_until(check, timeout_s, poll_s, what=what)
    return time.monotonic() - start


@pytest.fixture
def cluster(fresh_cluster: LocalCluster) -> LocalCluster:
    return fresh_cluster  # these tests kill its processes


@pytest.mark.timeout(120)
def test_services_survive_redis_loss_and_resume_when_it_returns(cluster: LocalCluster) -> None:
    assert _turn(cluster) == 200
    assert cluster.redis is not None
    port, old_pid = cluster.redis.port, cluster.redis.pid
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    turns = 0
    while time.monotonic() - killed_at < 6.0:  # > 2 x the heartbeat TTL (3 s)
        assert [p.name for p in cluster.group.procs if not p.alive] == []
        assert _turn(cluster, f"outage-{turns}") == 200
        turns += 1
        time.sleep(0.5)  # not a wait: the outage's turns are paced over its whole length
    code, body = _get(f"http://{cluster.http_addr}/healthz")
    assert code == 503 and body["status"] == "degraded" and not body["redis_reachable"]
    assert any("redis unreachable" in r for r in body["reasons"]), body
    assert all(p.alive for p in cluster.group.procs)

    cluster.redis.stop()  # the dead server's temp dir
    cluster.redis = RedisServer(port=port).start()  # the cluster's stop() stops this one
    restarted = time.monotonic()
    names = ["decode0", "prefill0", "scheduler", "storage"]
    took = _wait(
        "registry repopulated",
        lambda: [m.name for m in _members(cluster.redis_url, cluster.run_id)] == names,
        timeout_s=10,
    )
    print(f"outage turns={turns}; registry repopulated {took:.2f} s after Redis returned")
    # the turns of the outage were buffered and reach the new Redis
    _wait(
        "buffered events written",
        lambda: (
            sum(e["kind"] == "turn_done" for e in _events(cluster.redis_url, cluster.run_id))
            >= turns
        ),
        timeout_s=10,
    )
    _wait("healthy again", lambda: _get(f"http://{cluster.http_addr}/healthz")[0] == 200, 10)
    print(f"healthy {time.monotonic() - restarted:.2f} s after Redis returned")
    assert _turn(cluster, "after") == 200
    assert cluster.group.restarts == []


@pytest.mark.timeout(120)
def test_a_crashed_service_is_restarted_and_the_cluster_serves(cluster: LocalCluster) -> None:
    assert _turn(cluster) == 200
    victim = next(p for p in cluster.group.procs if p.name == "decode0")
    old_pid = victim.popen.pid
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()

    def restarted() -> bool:
        cluster.group.check_alive()  # what `dualpath up` calls every 0.2 s
        return bool(cluster.group.restarts)

    _wait("decode0 restarted", restarted, timeout_s=10, poll_s=0.05)
    rec = cluster.group.restarts[0]
    assert (rec.name, rec.old_pid, rec.exit_code) == ("decode0", old_pid, -signal.SIGKILL)

    def registered() -> bool:
        cluster.group.check_alive()
        ms = {m.name: m for m in _members(cluster.redis_url, cluster.run_id)}
        return "decode0" in ms and ms["decode0"].meta.get("pid") == str(rec.new_pid)

    _wait("the new decode0 registered", registered, timeout_s=30, poll_s=0.1)
    registered_at = time.monotonic()
    # every service reads the registry every ttl/2 = 1.5 s: then they all know the new address
    _wait("scheduler healthy", lambda: _get(f"http://{cluster.http_addr}/healthz")[0] == 200, 15)
    # until every service has read the registry again (every TTL/2) a turn may still go to
    # the old decode0 address and fail; then the cluster serves
    attempts = iter(range(100))
    _wait(
        "a turn served after the restart",
        lambda: _turn(cluster, f"after-restart-{next(attempts)}") == 200,
        timeout_s=15,
        poll_s=0.25,
    )
    print(
        f"restart: detected+respawned {rec.restarted_at - killed_at:.2f} s after SIGKILL, "
        f"registered {registered_at - killed_at:.2f} s, turn ok "
        f"{time.monotonic() - killed_at:.2f} s"
    )


@pytest.mark.timeout(60)
def test_restart_policy_never_and_restart_limit_fail_the_run(tmp_path: Path) -> None:
    """`never` keeps the fail-stop behaviour; a service that keeps crashing is given up on."""
    group = ProcessGroup(tmp_path)
    group.procs.append(_fake_proc(group, "decode0", code=1))
    group.supervise(RestartPolicy(Restart.NEVER))
    with pytest.raises(ClusterStartError, match="decode0 exited with code 1"):
        group.check_alive()
    policy = RestartPolicy(max_restarts=0)
    group.supervise(policy)
    with pytest.raises(ClusterStartError, match="after 0 restarts within 60 s; giving up"):
        group.check_alive()
    assert RestartPolicy().restarts(-9) and not RestartPolicy().restarts(0)
    assert [RestartPolicy().delay(n) for n in range(5)] == [0, 0.25, 0.5, 1.0, 2.0]


def _fake_proc(group: ProcessGroup, name: str, code: int) -> Proc:
    popen = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    popen.wait(timeout=10)
    return Proc(name, popen, group.log_dir / f"{name}.log")


@pytest.mark.timeout(60)
def test_healthz_says_503_with_reasons_when_every_engine_is_lost(cluster: LocalCluster) -> None:
    for m in cluster.members:
        code, body = _get(f"http://{m.admin_addr}/healthz")
        assert (code, body["status"], body["reasons"]) == (200, "ok", []), m.name
    for p in cluster.group.procs:
        if p.name in ("prefill0", "decode0"):
            os.kill(p.popen.pid, signal.SIGKILL)
            p.popen.wait(timeout=10)
    sched = f"http://{cluster.http_addr}/healthz"
    took = _wait("scheduler reports the lost engines", lambda: _get(sched)[0] == 503, 15)
    code, body = _get(sched)
    assert body["status"] == "degraded" and body["lost"] == ["decode0", "prefill0"], body
    assert "lost peers: decode0, prefill0" in body["reasons"]
    storage = next(m for m in cluster.members if m.name == "storage")
    url = f"http://{storage.admin_addr}/healthz"
    _wait("storage reports the lost engines", lambda: _get(url)[0] == 503, 5)  # own watch
    code, body = _get(url)
    assert body["status"] == "degraded" and body["lost"] == ["decode0", "prefill0"], body
    assert _get(f"http://{storage.admin_addr}/livez") == (200, {"status": "alive", "reasons": []})
    print(f"lost engines reported {took:.2f} s after SIGKILL")


class _Shell(ServiceShell):
    """The smallest concrete shell: health needs only the base class's state."""

    def add_to(self, server: Any) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}


@pytest.mark.asyncio
async def test_health_of_a_failed_or_starting_service_is_503() -> None:
    shell = _Shell()
    health = Health(shell, {"storage"})
    assert health.report()[1]["status"] == "starting" and health.report()[0] == 503
    shell.ready = True
    assert health.report() == (
        200,
        {"status": "ok", "reasons": [], "ready": True, "lost": [], "redis_reachable": True},
    )
    shell.fail(RuntimeError("lost KV of request 7"))
    code, body = health.report()
    assert (code, body["status"]) == (503, "failed")
    assert body["reasons"] == ["failed: RuntimeError('lost KV of request 7')"]
    shell.fatal.exception()  # retrieved: no "exception was never retrieved" warning


def _read_lines(stream: Any, out: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        out.put(line)


@pytest.mark.timeout(120)
def test_sigkill_of_up_takes_every_child_down(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "dualpath", "up", "--preset", "smoke", "--http-port", "0"]
    cmd += ["--run-dir", str(tmp_path / "cluster")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    up = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    children: list[psutil.Process] = []
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_lines, args=(up.stdout, lines), daemon=True).start()
        seen = ""
        deadline = time.monotonic() + 90
        while "agent turns" not in seen:  # the endpoint table: every service is registered
            assert up.poll() is None, f"dualpath up exited:\n{seen}"
            assert time.monotonic() < deadline, f"dualpath up not ready:\n{seen}"
            with contextlib.suppress(queue.Empty):
                seen += lines.get(timeout=0.5)
        children = psutil.Process(up.pid).children(recursive=True)
        names = sorted(" ".join(c.cmdline()) for c in children)
        assert len(children) == 5, names  # redis-server + storage, prefill0, decode0, scheduler
        up.send_signal(signal.SIGKILL)
        up.wait(timeout=10)
        killed_at = time.monotonic()
        _gone, alive = psutil.wait_procs(children, timeout=15)
        took = time.monotonic() - killed_at
        assert alive == [], f"still running after {took:.1f} s: {alive}"
        assert took < 10.0
        print(f"every child of the SIGKILLed launcher gone {took:.2f} s after the kill")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
        for c in children:
            if c.is_running():
                c.kill()


@pytest.mark.timeout(30)
def test_a_service_without_the_kernel_signal_still_sees_its_parent_go(tmp_path: Path) -> None:
    """The fallback of lifeline.py: poll the parent pid (other systems, lost signals)."""
    mark, ready = tmp_path / "noticed", tmp_path / "watching"
    child = (
        "import asyncio, os, pathlib\n"
        "from dualpath.runtimes.process.control.lifeline import watch_parent\n"
        f"done = lambda: pathlib.Path({str(mark)!r}).write_text('yes')\n"
        "parent = os.getppid()\n"
        f"pathlib.Path({str(ready)!r}).write_text('yes')\n"
        "asyncio.run(watch_parent(parent, done, period_s=0.05))\n"
    )
    parent = (  # once the child knows its parent, the parent exits without a word
        "import pathlib, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        f"ready, deadline = pathlib.Path({str(ready)!r}), time.monotonic() + 10\n"
        "while not ready.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
    )
    subprocess.run([sys.executable, "-c", parent], timeout=20, check=True)
    assert ready.exists(), "the child never started watching its parent"
    _wait("the orphan noticed", mark.exists, timeout_s=10, poll_s=0.05)


def test_a_port_in_use_fails_up_with_one_reason_and_no_traceback(tmp_path: Path) -> None:
    """The scheduler cannot bind its HTTP port: `dualpath up` names the port and the flag on
    its first line, quotes only this run's log lines (an earlier run's stay out), and no
    gRPC "Event loop is closed" traceback follows (its server is stopped before exit)."""
    logs = tmp_path / "cluster" / "logs"
    logs.mkdir(parents=True)
    (logs / "scheduler.log").write_text("an earlier run's last line\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "dualpath", "up", "--preset", "smoke"]
        cmd += ["--http-port", str(port), "--run-dir", str(tmp_path / "cluster")]
        env = {**os.environ, "COLUMNS": "200"}
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    first = out.strip().splitlines()[0]
    assert f"service scheduler exited with code 1: port 127.0.0.1:{port} is not free" in first
    assert "--http-port" in first
    assert "earlier run" not in out and "Traceback" not in out, out
    log = (logs / "scheduler.log").read_text()
    assert "Traceback" not in log and "Event loop is closed" not in log, log


@pytest.mark.parametrize(
    "line",
    [
        'T ERROR storage service_failed error="Redis does not answer at \\"x\\"" exit_code=1',
        '{"event": "service_failed", "error": "Redis does not answer at \\"x\\"", "exit_code": 1}',
    ],
)
def test_failure_reason_reads_either_log_format_from_this_run_on(tmp_path: Path, line: str) -> None:
    log = tmp_path / "storage.log"
    old = 'T ERROR storage service_failed error="an earlier run" exit_code=1\n'
    log.write_text(old + line + "\n")
    assert failure_reason(log) == 'Redis does not answer at "x"'
    assert failure_reason(log, start=len(old) + len(line) + 1) is None
    assert "earlier" not in log_tail(log, start=len(old))
