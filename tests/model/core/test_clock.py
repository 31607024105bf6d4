"""The virtual loop jumps over idle time deterministically; the real clock dilates."""

from __future__ import annotations

import asyncio
import time

import pytest

from dualpath.model.core.clock import RealClock, SimulationDeadlockError, VirtualClock, run_virtual


def test_virtual_time_jumps_without_wall_time() -> None:
    async def main(clock: VirtualClock) -> tuple[float, float]:
        t0 = time.perf_counter()
        await clock.sleep(3600.0)
        return clock.now(), time.perf_counter() - t0

    now, wall = run_virtual(main)
    assert now == pytest.approx(3600.0)
    assert wall < 5.0  # an hour of emulated time does not sleep an hour


def test_virtual_timers_fire_in_time_order() -> None:
    async def main(clock: VirtualClock) -> list[tuple[str, float]]:
        seen: list[tuple[str, float]] = []
        clock.call_at(2.0, lambda: seen.append(("b", clock.now())))
        clock.call_at(1.0, lambda: seen.append(("a", clock.now())))
        await clock.sleep_until(5.0)
        return seen

    assert run_virtual(main) == [("a", 1.0), ("b", 2.0)]


def test_deadlock_is_reported_not_hung() -> None:
    async def main(clock: VirtualClock) -> None:
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(SimulationDeadlockError):
        run_virtual(main)


def test_same_program_same_trace() -> None:
    async def main(clock: VirtualClock) -> list[float]:
        out: list[float] = []

        async def worker(period: float) -> None:
            for _ in range(50):
                await clock.sleep(period)
                out.append(round(clock.now(), 9))

        await asyncio.gather(worker(0.3), worker(0.7), worker(0.11))
        return out

    assert run_virtual(main) == run_virtual(main)


def test_real_clock_dilation_and_lag() -> None:
    async def main() -> tuple[float, float]:
        clock = RealClock(dilation=10.0)  # 10 emulated seconds per wall second
        t0 = time.perf_counter()
        await clock.sleep(0.5)  # 0.05 s of wall time
        return clock.now(), time.perf_counter() - t0

    now, wall = asyncio.run(main())
    assert now >= 0.5
    assert wall == pytest.approx(now / 10.0, rel=0.5, abs=0.05)


def test_real_clock_rejects_bad_dilation() -> None:
    with pytest.raises(ValueError, match="dilation"):
        RealClock(dilation=0)
