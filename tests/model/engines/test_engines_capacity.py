"""model/engines/capacity.py: a FIFO byte pool (DRAM buffers, HBM) and a join of completions."""

from __future__ import annotations

import asyncio

import pytest

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.engines.capacity import CapacityError, CapacityPool, Join


def test_capacity_waits_fifo_and_releases() -> None:
    async def main(clock: VirtualClock) -> list[str]:
        pool = CapacityPool("buf", 10.0)
        order: list[str] = []

        async def take(name: str, n: float, hold: float) -> None:
            await pool.acquire(n)
            order.append(name)
            await clock.sleep(hold)
            pool.release(n)

        await asyncio.gather(take("a", 8, 1), take("big", 9, 1), take("small", 1, 1))
        assert pool.used == 0
        assert pool.peak <= 10
        return order

    # FIFO: "small" would fit next to "a" but must not overtake "big".
    assert run_virtual(main) == ["a", "big", "small"]


def test_capacity_rejects_impossible_request() -> None:
    async def main(clock: VirtualClock) -> None:
        await CapacityPool("buf", 1.0).acquire(2.0)

    with pytest.raises(CapacityError, match="capacity"):
        run_virtual(main)


def test_join_waits_for_all() -> None:
    async def main(clock: VirtualClock) -> float:
        join = Join()
        for t in (1.0, 3.0, 2.0):
            clock.call_at(t, join.add())
        await join.wait()
        return clock.now()

    assert run_virtual(main) == 3.0


@pytest.mark.asyncio
async def test_a_cancelled_waiter_neither_keeps_its_place_nor_leaks_bytes() -> None:
    pool = CapacityPool("buf", 100.0)
    await pool.acquire(90.0)
    waiter = asyncio.ensure_future(pool.acquire(50.0))
    small = asyncio.ensure_future(pool.acquire(10.0))
    await asyncio.sleep(0)  # a yield, not a wait: both acquires queue behind the 90
    waiter.cancel()
    await asyncio.wait_for(small, 1.0)  # the head left: the next one fits at once
    assert waiter.cancelled() and pool.used == 100.0
    pool.release(100.0)
    assert pool.used == 0.0
