"""A local emulated cluster: Redis + storage + one process per node + the scheduler.

Every child (Redis included) dies with the process that started the cluster, even if that
process is SIGKILLed (runtimes/process/control/lifeline.py): start the cluster from the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis
import yaml

from dualpath.model.config.settings import Scenario
from dualpath.model.faults.spec import parse_all
from dualpath.runtimes.process.control import Member, RedisServer, Registry
from dualpath.runtimes.process.launcher.faults import LiveFaults
from dualpath.runtimes.process.launcher.procs import ClusterStartError, ProcessGroup, RestartPolicy
from dualpath.runtimes.process.serving.host import expected_members
from dualpath.runtimes.process.serving.options import TOKEN_ENV


@dataclass(frozen=True, slots=True)
class UpOptions:
    run_dir: Path
    http_port: int = 8000
    dilation: float = 1.0
    real_payload: float = 0.0
    redis_url: str | None = None  # None: start a private redis-server
    run_id: str | None = None
    start_timeout_s: float = 120.0
    run_timeout_s: float = 3600.0  # deadline of one turn through the HTTP API (wall)
    grace_s: float = 10.0
    # what check_alive() does when a service exits once the cluster is up (`--restart`)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    # The run's shared token for every service (gRPC calls and /metrics), or None. The
    # services bind loopback, where none is needed; `dualpath up` passes $DUALPATH_TOKEN.
    token: str | None = field(default=None, repr=False)
    # every service's log lines (logs.py); None: the services read $DUALPATH_LOG_FORMAT
    # and $DUALPATH_LOG_LEVEL, which they inherit
    log_format: str | None = None
    log_level: str | None = None


@dataclass
class LocalCluster:
    sc: Scenario
    opts: UpOptions
    group: ProcessGroup = field(init=False)
    redis: RedisServer | None = None
    redis_url: str = ""
    run_id: str = ""
    epoch: float = 0.0
    members: list[Member] = field(default_factory=list)
    faults: LiveFaults | None = None

    def __post_init__(self) -> None:
        self.group = ProcessGroup(self.opts.run_dir / "logs")

    def tick(self) -> None:
        """Apply due faults, restart crashed services (raises ClusterStartError when one
        exits that is not to be restarted). Call it often: every 0.2 s or less."""
        if self.faults is not None:
            self.faults.step()
        self.group.check_alive()

    @property
    def http_addr(self) -> str:
        return next(m.admin_addr for m in self.members if m.role == "scheduler")

    def grpc_addrs(self) -> dict[str, str]:
        return {m.name: m.grpc_addr for m in self.members}

    def start(self) -> None:
        o = self.opts
        o.run_dir.mkdir(parents=True, exist_ok=True)
        scenario_file = o.run_dir / "scenario.yaml"
        scenario_file.write_text(yaml.safe_dump(self.sc.model_dump(mode="json"), sort_keys=False))
        if o.redis_url is None:
            self.redis = RedisServer().start()
            self.redis_url = self.redis.url
        else:
            self.redis_url = o.redis_url
        self.run_id = o.run_id or f"run-{int(time.time() * 1000)}"
        # Emulated t = 0 for every process of the run (perf_counter is system-wide monotonic).
        self.epoch = time.perf_counter()
        common = [
            "--preset", str(scenario_file), "--redis-url", self.redis_url, "--run-id",
            self.run_id, "--epoch", repr(self.epoch), "--speedup", repr(o.dilation),
            "--real-payload", repr(o.real_payload),
        ]  # fmt: skip
        for flag, value in (("--log-format", o.log_format), ("--log-level", o.log_level)):
            common += [flag, value] if value is not None else []
        # Through the environment, never argv (`ps` shows every local user a command line).
        # Always set: an empty value overrides a token the launcher's own environment holds
        # when this cluster is to run without one.
        env = {TOKEN_ENV: o.token or ""}
        self.group.spawn("storage", ["serve", "storage", *common], env)
        t = self.sc.topology
        for role, n in (("prefill", t.prefill_nodes), ("decode", t.decode_nodes)):
            for i in range(n):
                self.group.spawn(f"{role}{i}", ["serve", role, "--node", str(i), *common], env)
        self.group.spawn(
            "scheduler", ["serve", "scheduler", "--http-port", str(o.http_port), *common], env
        )
        asyncio.run(self._wait_healthy())
        self.group.supervise(o.restart)
        # the schedule's times count from the epoch, like every emulated time of the run
        self.faults = LiveFaults(
            parse_all(self.sc.faults.schedule),
            self.group,
            lambda: self.redis.pid if self.redis is not None else None,
            self.epoch,
            o.dilation,
        )

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.opts.start_timeout_s
        want = expected_members(self.sc)
        r = aioredis.Redis.from_url(self.redis_url)
        try:
            registry = Registry(r, self.run_id)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
                while True:
                    self.group.check_alive()
                    self.members = await registry.members()
                    if _counts(self.members) == want and await _all_healthy(http, self.members):
                        return
                    if time.monotonic() > deadline:
                        raise ClusterStartError(
                            f"the cluster was not healthy after {self.opts.start_timeout_s:.0f} s "
                            f"(registered: {sorted(m.name for m in self.members)}); logs in "
                            f"{self.group.log_dir}"
                        )
                    await asyncio.sleep(0.2)
        finally:
            await r.aclose()

    def settle(self) -> dict[str, str]:
        """Wait (bounded by `start_timeout_s`) until every service that should be up answers
        its health check, and return their gRPC addresses by name. A service a fault started
        again just before the end registers its new address only once it is up (asking the
        old one is refused); one a kill fault keeps down for good is left out."""
        return asyncio.run(self._wait_serving())

    async def _wait_serving(self) -> dict[str, str]:
        deadline = time.monotonic() + self.opts.start_timeout_s
        r = aioredis.Redis.from_url(self.redis_url, socket_timeout=5)
        try:
            registry = Registry(r, self.run_id)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
                while True:
                    self.tick()  # a fault due now still happens; a crashed service restarts
                    want = {p.name for p in self.group.procs} - self.group.held
                    if essential := sorted(self.group.held & {"storage", "scheduler"}):
                        raise ClusterStartError(
                            f"{' and '.join(essential)} stayed down to the end of the run (a "
                            "kill fault without a duration): the report needs its statistics; "
                            "give the fault an end, e.g. kill:storage@10+5"
                        )
                    self.members = await registry.members()
                    up = [m for m in self.members if m.name in want]
                    if {m.name for m in up} == want and await _all_healthy(http, up):
                        return {m.name: m.grpc_addr for m in up}
                    if time.monotonic() > deadline:
                        missing = sorted(want - {m.name for m in up}) or sorted(want)
                        raise ClusterStartError(
                            f"at the end of the run, not every service answered within "
                            f"{self.opts.start_timeout_s:.0f} s (waiting for: "
                            f"{', '.join(missing)}); logs in {self.group.log_dir}"
                        )
                    await asyncio.sleep(0.2)
        finally:
            await r.aclose()

    def stop(self) -> list[str]:
        killed = self.group.stop(self.opts.grace_s)
        if self.redis is not None:
            self.redis.stop()
        return killed


def _counts(members: list[Member]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in members:
        out[m.role] = out.get(m.role, 0) + 1
    return out


async def _all_healthy(http: aiohttp.ClientSession, members: list[Member]) -> bool:
    for m in members:
        try:
            async with http.get(f"http://{m.admin_addr}/healthz") as resp:
                if resp.status != 200:
                    return False
                body = await resp.json()
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return False
        if body.get("status") != "ok" or not body.get("ready"):
            return False
    return True


@contextlib.contextmanager
def local_cluster(sc: Scenario, opts: UpOptions) -> Iterator[LocalCluster]:
    cluster = LocalCluster(sc, opts)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
