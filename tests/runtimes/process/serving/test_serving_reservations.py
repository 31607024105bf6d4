"""runtimes/process/serving/reservations.py: what a node's DRAM buffer holds for each attempt of a
turn, so
an abandoned attempt gives its bytes back and is refused when it arrives late."""

from __future__ import annotations

import pytest

from dualpath.model.engines.capacity import CapacityPool
from dualpath.runtimes.process.serving.reservations import Reservations


@pytest.mark.asyncio
async def test_an_abandoned_attempt_gives_its_buffer_back_and_is_refused_later() -> None:
    pool = CapacityPool("buf", 100.0)
    res = Reservations(pool)
    await pool.acquire(60.0)
    assert res.hold((1, 0), 60.0)
    assert res.release((1, 0)) == 60.0 and pool.used == 0.0
    assert res.release((1, 0)) == 0.0  # idempotent
    await pool.acquire(10.0)
    assert not res.hold((1, 0), 10.0) and pool.used == 0.0  # arrived after its release
    await pool.acquire(5.0)
    assert res.hold((1, 1), 5.0) and res.take((1, 1)) == 5.0  # the next attempt is its own
