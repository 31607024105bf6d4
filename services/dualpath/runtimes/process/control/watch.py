"""The run's membership as a service sees it: read from the registry every period, and
kept as last read while Redis is unreachable, so the service keeps serving its peers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from dualpath.runtimes.process.control.common import raise_if_cancelling
from dualpath.runtimes.process.control.registry import Member, Registry
from dualpath.runtimes.process.control.resilience import REDIS_ERRORS, Outage

_log = logging.getLogger(__name__)
# an entry written by another version is skipped like an outage, not fatal to the service
_READ_ERRORS: tuple[type[Exception], ...] = (*REDIS_ERRORS, ValueError)


class MembershipWatch:
    """Calls `on_members` with every fresh read of the registry, never with a stale one.

    A failed read (Redis down, hung, or an unreadable entry) keeps `members` as they were
    and retries with backoff. The first read after an outage is not trusted: a restarted
    Redis holds only the members that re-registered so far, which would look like lost
    peers; every live member re-registers within one heartbeat interval (`settle_s`), so
    the watch reads again after that.
    """

    def __init__(
        self,
        registry: Registry,
        on_members: Callable[[list[Member]], None],
        period_s: float,
        timeout_s: float,
        settle_s: float,
        component: str = "registry-watch",
    ) -> None:
        if not (period_s > 0 and timeout_s > 0 and settle_s >= 0):
            raise ValueError("period_s and timeout_s must be > 0, settle_s >= 0")
        self._registry = registry
        self._on_members = on_members
        self.period_s, self.timeout_s, self.settle_s = period_s, timeout_s, settle_s
        self.outage = Outage(component, cap_s=period_s)
        self.members: list[Member] = []
        self.fresh_at: float | None = None  # monotonic time of the last delivered read

    def age(self) -> float | None:
        """Seconds since `members` were read (None: never)."""
        return None if self.fresh_at is None else time.monotonic() - self.fresh_at

    def seed(self, members: list[Member]) -> None:
        """Take a read made elsewhere (the startup discovery) as the current one."""
        self.members = members
        self.fresh_at = time.monotonic()

    async def run(self) -> None:
        """Watch until cancelled; never raises for Redis trouble."""
        delay = self.period_s
        while True:
            await asyncio.sleep(delay)
            raise_if_cancelling()
            delay = await self.poll()

    async def poll(self) -> float:
        """One read; returns how long to wait before the next."""
        try:
            members = await self._registry.members(timeout_s=self.timeout_s)
        except _READ_ERRORS as e:
            return min(self.period_s, self.outage.failed(e))
        if self.outage.ok() is not None:
            _log.warning(
                "control: membership read again after outage, settling settle_s=%.2f",
                self.settle_s,
            )
            return self.settle_s
        self.seed(members)
        self._on_members(members)
        return self.period_s
