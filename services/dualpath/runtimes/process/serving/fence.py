"""Fencing: an engine node that was stopped past its heartbeat lease does not resume.

While a node process is stopped (SIGSTOP, a paused container or VM) or its event loop
stalls longer than the registry TTL, the scheduler declares it lost and places its turns
again elsewhere. If it then simply resumed, it would finish work that now belongs to other
engines and hold buffer and HBM the scheduler has given away. So it fences itself: it
notices the gap in its own clock and exits non-zero, and its supervisor (`dualpath up
--restart`, compose, Kubernetes) starts a clean process that rejoins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

FENCED_EXIT = 75  # EX_TEMPFAIL: restart me


class LeaseExpiredError(RuntimeError):
    """This process was away longer than its heartbeat lease."""


async def watch(ttl_s: float, on_expired: Callable[[BaseException], None]) -> None:
    """Tick every ttl/10; a tick later than the whole TTL means peers have given up on us."""
    period = ttl_s / 10
    last = time.monotonic()
    while True:
        await asyncio.sleep(period)
        now = time.monotonic()
        if now - last > ttl_s:
            on_expired(
                LeaseExpiredError(
                    f"this process was stopped or stalled for {now - last:.1f} s, longer than "
                    f"its {ttl_s:g} s heartbeat lease: its turns were placed elsewhere, so it "
                    f"exits (code {FENCED_EXIT}) to be restarted clean"
                )
            )
            return
        last = now
