"""runtimes/process/serving/fence.py: a node whose loop was away longer than its heartbeat lease
fences
itself (its turns were placed elsewhere); a loop that keeps up is never fenced."""

from __future__ import annotations

import asyncio
import time

from dualpath.runtimes.process.serving.fence import FENCED_EXIT, LeaseExpiredError, watch

LEASE_S = 0.2


def test_a_stall_longer_than_the_lease_fences_the_process() -> None:
    async def main() -> list[BaseException]:
        expired: list[BaseException] = []
        task = asyncio.create_task(watch(LEASE_S, expired.append))
        await asyncio.sleep(0)  # a yield, not a wait: the watch takes its first tick
        time.sleep(1.5 * LEASE_S)  # not a wait: the stall under test (as SIGSTOP would be)
        await asyncio.wait_for(task, timeout=5)  # it returns once it has fenced
        return expired

    expired = asyncio.run(main())
    assert len(expired) == 1 and isinstance(expired[0], LeaseExpiredError)
    message = str(expired[0])
    assert f"longer than its {LEASE_S:g} s heartbeat lease" in message
    assert f"code {FENCED_EXIT}" in message


def test_a_loop_that_keeps_up_is_not_fenced() -> None:
    async def main() -> tuple[list[BaseException], bool]:
        expired: list[BaseException] = []
        task = asyncio.create_task(watch(LEASE_S, expired.append))
        for _ in range(30):  # three leases of short, normal work between ticks
            time.sleep(LEASE_S / 20)  # not a wait: the loop's own work, well within a tick
            await asyncio.sleep(LEASE_S / 10)
        running = not task.done()
        task.cancel()
        return expired, running

    expired, running = asyncio.run(main())
    assert expired == [] and running
