"""Engine registry: who is alive in this run, found through TTL'd Redis keys.

Each member owns one key, rewritten with a TTL every `ttl_s / 3`. TTL expiry is the failure
detector: a crashed or hung process stops refreshing and its key disappears after at most
`ttl_s`, without anyone having to notice the crash. Rewriting the whole key (not PEXPIRE)
means a heartbeat also brings a member back after the key was lost, e.g. a Redis restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass, field

from redis.asyncio import Redis

from dualpath.runtimes.process.control import keys
from dualpath.runtimes.process.control.common import (
    pack,
    raise_if_cancelling,
    require_bytes_client,
    unpack,
)
from dualpath.runtimes.process.control.resilience import REDIS_ERRORS, Outage

SCHEMA = 1
_SCAN_COUNT = 500
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    role: str  # one of keys.ROLES
    name: str  # unique per run, e.g. "prefill0"
    grpc_addr: str  # "127.0.0.1:50051"
    admin_addr: str
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys.validate_role(self.role)
        keys.validate_name("name", self.name)
        for k, v in self.meta.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"member {self.name}: meta[{k!r}] must map str to str")


def encode_member(m: Member) -> bytes:
    return pack({"schema": SCHEMA, **asdict(m)})


def decode_member(data: bytes | str, key: str) -> Member:
    if isinstance(data, str):  # only a decode_responses client returns str
        raise ValueError(f"registry entry {key} came back as text: use decode_responses=False")
    rec = unpack(data)
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
        raise ValueError(
            f"registry entry {key} has schema={got!r}; this build reads schema {SCHEMA} "
            "only: run every service from the same dualpath version or use a fresh run id"
        )
    missing = [k for k in ("role", "name", "grpc_addr", "admin_addr") if k not in rec]
    if missing:
        raise ValueError(f"registry entry {key} lacks field(s) {missing}: it was not written here")
    return Member(
        rec["role"], rec["name"], rec["grpc_addr"], rec["admin_addr"], dict(rec.get("meta") or {})
    )


class Registry:
    def __init__(self, redis: Redis, run_id: str, ttl_s: float = 3.0) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s={ttl_s!r} must be > 0 (seconds a silent member stays live)")
        self._r = require_bytes_client(redis)
        self._run = keys.validate_run_id(run_id)
        self.ttl_s = ttl_s

    @property
    def _ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    def _key(self, m: Member) -> str:
        return keys.member_key(self._run, m.role, m.name)

    async def register(self, member: Member) -> None:
        await self._r.set(self._key(member), encode_member(member), px=self._ttl_ms)

    async def deregister(self, member: Member) -> None:
        await self._r.delete(self._key(member))

    async def heartbeat_forever(
        self, member: Member, interval_s: float | None = None, outage: Outage | None = None
    ) -> None:
        """Re-register every `interval_s` (default ttl/3) until cancelled.

        A Redis outage is logged and retried rather than raised: the member is still alive,
        and ending the heartbeat would turn a transient outage into a permanent removal.
        Each write is bounded by `beat_timeout` so a hung call cannot hold the next beat
        back past the TTL; while Redis is down, retries back off up to `interval_s`, so the
        member re-registers within one interval of Redis coming back. (A beat, not a retry
        loop: it never ends on success, so a retry library would only hide the sleep; the
        backoff is `Outage`'s, which the service's health also reads.)
        """
        interval = self.check_interval(interval_s)
        timeout = self.beat_timeout(interval)
        state = outage or Outage(f"heartbeat:{member.name}", cap_s=interval)
        while True:
            try:
                async with asyncio.timeout(timeout):
                    await self.register(member)
                state.ok()
                delay = interval
            except REDIS_ERRORS as e:
                delay = min(interval, state.failed(e))
            raise_if_cancelling()
            await asyncio.sleep(delay)

    def beat_timeout(self, interval_s: float) -> float:
        """Deadline of one heartbeat write: a beat that started on time and timed out still
        leaves room for the next one before the TTL runs out (interval + timeout < ttl)."""
        return max(interval_s, self.ttl_s / 3)

    def check_interval(self, interval_s: float | None) -> float:
        interval = self.ttl_s / 3 if interval_s is None else interval_s
        if not 0 < interval < self.ttl_s:
            raise ValueError(
                f"interval_s={interval_s!r} must be > 0 and < ttl_s={self.ttl_s}, "
                "or the member expires between two heartbeats"
            )
        return interval

    async def members(
        self, role: str | None = None, timeout_s: float | None = None
    ) -> list[Member]:
        """Live members (optionally of one role), sorted by name; `timeout_s` bounds the
        whole read (SCAN pages + MGET), raising TimeoutError."""
        async with asyncio.timeout(timeout_s):
            return await self._members(role)

    async def _members(self, role: str | None) -> list[Member]:
        pattern = keys.members_pattern(self._run, role)
        found = [k async for k in self._r.scan_iter(match=pattern, count=_SCAN_COUNT)]
        if not found:
            return []
        values = await self._r.mget(found)
        out = [
            decode_member(v, k.decode() if isinstance(k, bytes) else str(k))
            for k, v in zip(found, values, strict=True)
            if v is not None  # expired between SCAN and MGET
        ]
        return sorted(out, key=lambda m: m.name)

    async def wait_for(
        self, roles_counts: dict[str, int], timeout_s: float, poll_s: float = 0.1
    ) -> list[Member]:
        """Poll until at least `n` members of each role are live; returns those roles' members."""
        for role, n in roles_counts.items():
            keys.validate_role(role)
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"roles_counts[{role!r}]={n!r} must be an int >= 0")
        deadline = time.monotonic() + timeout_s
        # A poll, not a retry: a Redis that is restarting or briefly unreachable is waited
        # for like a missing member, and only the deadline ends the wait.
        outage = Outage(f"registry-wait:{self._run}", cap_s=max(poll_s, 0.5))
        while True:
            live: list[Member] = []
            try:
                live = [
                    m
                    for m in await self.members(timeout_s=max(self.ttl_s / 3, poll_s))
                    if m.role in roles_counts
                ]
                outage.ok()
            except REDIS_ERRORS as e:
                outage.failed(e)
            missing = _missing(roles_counts, live)
            if not missing:
                return live
            if time.monotonic() >= deadline:
                why = f"; Redis unreachable: {outage.last_error}" if outage.down else ""
                raise TimeoutError(
                    f"run {self._run}: after {timeout_s:g}s still missing "
                    + ", ".join(missing)
                    + " (check that those services started and reach this Redis)"
                    + why
                )
            raise_if_cancelling()
            await asyncio.sleep(
                poll_s if not outage.down else max(poll_s, outage.next_try - time.monotonic())
            )


def _missing(roles_counts: dict[str, int], live: list[Member]) -> list[str]:
    out = []
    for role, want in sorted(roles_counts.items()):
        have = sum(1 for m in live if m.role == role)
        if have < want:
            out.append(f"{want - have} {role} ({have} of {want} live)")
    return out


class Heartbeat:
    """Owns the heartbeat task of one member, for a service's composition root.

    `outage` tells whether the beats currently reach Redis (the service's health reports
    an unreachable control plane from it).
    """

    def __init__(self, registry: Registry, member: Member, interval_s: float | None = None) -> None:
        self._registry = registry
        self.member = member
        self._interval_s = registry.check_interval(interval_s)
        self.outage = Outage(f"heartbeat:{member.name}", cap_s=self._interval_s)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start heartbeating (the first beat registers the member). No-op if running."""
        if self.running:
            return
        self._task = asyncio.create_task(
            self._registry.heartbeat_forever(self.member, self._interval_s, self.outage),
            name=f"heartbeat-{self.member.name}",
        )

    async def stop(self) -> None:
        """Cancel the heartbeat and deregister, so peers see the exit at once, not after TTL."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # wait() instead of `await task`: a cancellation of stop() itself must propagate.
            await asyncio.wait({task})
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                raise exc
        try:
            async with asyncio.timeout(self._registry.beat_timeout(self._interval_s)):
                await self._registry.deregister(self.member)
        except REDIS_ERRORS as e:
            raise_if_cancelling()
            # The entry still expires after the TTL, so shutdown need not fail for this.
            _log.warning("registry: deregister of %s failed (%r)", self.member.name, e)
