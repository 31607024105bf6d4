"""Hypothesis properties of the fabric: conservation, completion, max-min fairness; RealClock."""

from __future__ import annotations

import asyncio
import functools
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dualpath.model.core.clock import RealClock, VirtualClock, run_virtual
from dualpath.model.links import Fabric, Flow, Link, paper_cnic_arbitration

N_LINKS = 5
BUCKET = 0.25

flow_st = st.tuples(
    st.floats(0.0, 3.0),  # start time
    st.floats(1.0, 400.0),  # bytes
    st.lists(st.integers(0, N_LINKS - 1), min_size=1, max_size=3, unique=True),  # hops
    st.sampled_from([0, 2]),  # VL
    st.booleans(),  # cancel half-way?
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rates=st.lists(st.floats(10.0, 200.0), min_size=N_LINKS, max_size=N_LINKS),
    flows=st.lists(flow_st, min_size=1, max_size=25),
    vl_links=st.booleans(),
    max_cascade=st.sampled_from([0, 2, 64]),
)
def test_links_never_exceed_their_rate_and_every_flow_finishes(
    rates: list[float],
    flows: list[tuple[float, float, list[int], int, bool]],
    vl_links: bool,
    max_cascade: int,
) -> None:
    async def main(clock: VirtualClock) -> None:
        fabric = Fabric(clock, bucket_s=BUCKET, max_cascade=max_cascade)
        arb = paper_cnic_arbitration() if vl_links else None
        links = [fabric.add_link(f"l{i}", r, arb if i % 2 else None) for i, r in enumerate(rates)]
        started: dict[int, Flow] = {}
        done: list[int] = []

        def launch(idx: int, nbytes: float, hops: list[Link], vl: int, cancel: bool) -> None:
            flow = fabric.start(nbytes, hops, vl, lambda: done.append(idx))
            started[idx] = flow
            if cancel:
                clock.call_at(clock.now() + 0.5 * nbytes / max(rates), flow.cancel)

        for idx, (at, nbytes, hop_ids, vl, cancel) in enumerate(flows):
            hops = [links[h] for h in hop_ids]
            clock.call_at(at, functools.partial(launch, idx, nbytes, hops, vl, cancel))
        await clock.sleep(3.0 + 1e-9)
        while fabric.active_flows:
            await clock.sleep(1.0)
        horizon = clock.now()

        assert len(started) == len(flows)
        assert sorted(done) == [i for i in range(len(flows)) if not started[i].cancelled]
        for link in links:
            series = link.series()
            assert all(b <= link.rate * BUCKET * (1 + 1e-9) for b in series)
            moved = 0.0
            for k, b in enumerate(series):  # cumulative: bytes by T never exceed rate x T
                moved += b
                assert moved <= link.rate * (k + 1) * BUCKET * (1 + 1e-9)
            assert sum(series) == pytest.approx(link.bytes_total, rel=1e-9, abs=1e-6)
            crossing = [f for f in started.values() if link in f.hops]
            expected = sum(f.nbytes - f.remaining for f in crossing)
            assert link.bytes_total == pytest.approx(expected, rel=1e-6, abs=1e-6)
            assert link.busy_s <= horizon + 1e-9
        assert fabric.active_flows == 0

    run_virtual(main)


def max_min_reference(capacity: list[float], paths: list[list[int]]) -> list[float]:
    """Progressive filling: the textbook max-min fair allocation for equal-share links."""
    rate = [0.0] * len(paths)
    frozen = [False] * len(paths)
    left = list(capacity)
    while not all(frozen):
        users = [
            [f for f, path in enumerate(paths) if link in path and not frozen[f]]
            for link in range(len(left))
        ]
        step = min(left[link] / len(u) for link, u in enumerate(users) if u)
        for f, path in enumerate(paths):
            if not frozen[f]:
                rate[f] += step
                for link in path:
                    left[link] -= step
        for link, u in enumerate(users):
            if u and left[link] <= 1e-9 * capacity[link]:
                for f in u:
                    frozen[f] = True
    return rate


@settings(max_examples=200, deadline=None)
@given(
    # Wide range so some links are roomy (all flows limited elsewhere: the fast path).
    capacity=st.lists(st.floats(1.0, 1000.0), min_size=N_LINKS, max_size=N_LINKS),
    paths=st.lists(
        st.lists(st.integers(0, N_LINKS - 1), min_size=1, max_size=3, unique=True),
        min_size=1,
        max_size=20,
    ),
)
def test_shares_converge_to_max_min_fairness(capacity: list[float], paths: list[list[int]]) -> None:
    """Work conservation: with the default cascade bound, rates equal the max-min allocation."""

    async def main(clock: VirtualClock) -> list[float]:
        fabric = Fabric(clock)
        links = [fabric.add_link(f"l{i}", c) for i, c in enumerate(capacity)]
        flows = [fabric.start(1e12, [links[i] for i in p]) for p in paths]
        assert fabric.cascade_truncations == 0
        return [f.rate for f in flows]

    got = run_virtual(main)
    assert got == pytest.approx(max_min_reference(capacity, paths), rel=1e-6)


def test_real_clock_transfer_lands_on_its_emulated_schedule() -> None:
    """~0.2 s wall: the completion is stamped at start + size/rate exactly (absolute schedule),
    and the waiter wakes no earlier than that and not absurdly late, even on a busy host."""
    rate, size = 1e9, 0.2e9

    async def main() -> tuple[float, float, float]:
        clock = RealClock()
        fabric = Fabric(clock)
        link = fabric.add_link("l", rate)
        flow = fabric.start(size, [link])
        started = flow.started_at
        wall0 = time.perf_counter()
        while not flow.done:
            await asyncio.sleep(0.005)
        assert flow.finished_at is not None
        return flow.finished_at - started, time.perf_counter() - wall0, link.bytes_total

    emulated, wall, moved = asyncio.run(main())
    assert emulated == pytest.approx(size / rate, rel=1e-9)
    assert moved == pytest.approx(size, rel=1e-9)
    assert 0.2 - 0.003 <= wall <= 2.0
    assert math.isfinite(wall)


def test_real_clock_late_wakeups_keep_the_absolute_schedule() -> None:
    """A host stall must not stretch emulated transfers: completions (and the flows their
    callbacks start) are stamped at their scheduled emulated times, not at the late wake-up."""
    rate = 1e9

    async def main() -> tuple[Flow, list[Flow]]:
        fabric = Fabric(RealClock())
        link = fabric.add_link("l", rate)
        chained: list[Flow] = []
        first = fabric.start(
            0.05e9, [link], on_done=lambda: chained.append(fabric.start(0.05e9, [link]))
        )
        time.sleep(0.15)  # block the loop well past both completions
        while not chained or not chained[0].done:
            await asyncio.sleep(0.005)
        return first, chained

    first, chained = asyncio.run(main())
    assert first.finished_at == pytest.approx(first.started_at + 0.05, rel=1e-12)
    assert chained[0].started_at == first.finished_at
    assert chained[0].finished_at == pytest.approx(first.started_at + 0.10, rel=1e-12)
