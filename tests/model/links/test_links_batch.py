"""Same-instant starts, cancels and completions share one re-share, with the results of
re-sharing after each (docs/links.md, "Same-instant events share one re-share")."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dualpath.model.core.clock import RealClock
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.links import Fabric, Flow

GB = 1e9
N_LINKS = 5

burst_st = st.lists(  # one instant's starts: (bytes, hops); a cancel of an earlier flow?
    st.tuples(
        st.floats(0.5 * GB, 40 * GB),
        st.lists(st.integers(0, N_LINKS - 1), min_size=1, max_size=3, unique=True),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


def _run(
    rates: list[float], bursts: list[list[Any]], one_by_one: bool
) -> tuple[list[Any], list[int]]:
    """Bursts at t = 0, 1, 2, ... on plain links (whose max-min shares are unique); returns
    each flow's finish and each link's bytes, and the re-shares the bursts' instants cost."""
    core = VirtualCore()
    fabric = Fabric(core)
    links = [fabric.add_link(f"l{i}", r) for i, r in enumerate(rates)]
    flows: list[Flow] = []
    cost: list[int] = []

    def burst(items: list[Any]) -> None:
        before = fabric.relaxes
        for nbytes, hops, cancel in items:
            if cancel and flows:
                flows[len(flows) // 2].cancel()
            flows.append(fabric.start(nbytes, [links[h] for h in hops]))
            if one_by_one:
                _ = flows[-1].rate  # a read makes the fabric re-share at once
        fabric.flush()
        cost.append(fabric.relaxes - before)

    for k, items in enumerate(bursts):
        core.call_at(float(k), lambda items=items: burst(items))
    core.call_at(1e6, core.stop)
    core.run()
    assert fabric.active_flows == 0
    out: list[Any] = [(f.finished_at, f.cancelled) for f in flows]
    out += [ln.bytes_total for ln in links]
    return out, cost


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rates=st.lists(
        st.sampled_from([10 * GB, 25 * GB, 50 * GB]), min_size=N_LINKS, max_size=N_LINKS
    ),
    bursts=st.lists(burst_st, min_size=1, max_size=4),
)
def test_one_reshare_per_instant_gives_the_rates_of_one_per_start(
    rates: list[float], bursts: list[list[Any]]
) -> None:
    batched, cost = _run(rates, bursts, one_by_one=False)
    alone, cost_alone = _run(rates, bursts, one_by_one=True)
    assert len(batched) == len(alone)
    for got, want in zip(batched, alone, strict=True):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert max(cost) <= 1  # a burst, cancels included, re-shares at most once
    assert sum(cost) <= sum(cost_alone)


def test_a_burst_of_starts_costs_one_reshare_and_reads_see_it() -> None:
    core = VirtualCore()
    fabric = Fabric(core)
    link = fabric.add_link("l", 10 * GB)
    seen: dict[str, Any] = {}

    def burst() -> None:
        before = fabric.relaxes
        flows = [fabric.start(10 * GB, [link]) for _ in range(4)]
        seen["owed"] = fabric.relaxes - before  # nothing re-shared yet ...
        seen["rates"] = [f.rate for f in flows]  # ... until a rate is read
        seen["cost"] = fabric.relaxes - before

    fabric.start(10 * GB, [link])  # the link is busy: the burst takes the general path
    core.call_at(0.5, burst)
    core.call_at(100.0, core.stop)
    core.run()
    assert seen["owed"] == 0
    assert seen["cost"] == 1
    assert seen["rates"] == [2 * GB] * 4


def test_completions_and_the_starts_their_callbacks_make_share_one_reshare() -> None:
    core = VirtualCore()
    fabric = Fabric(core)
    link = fabric.add_link("l", 10 * GB)
    chained: list[Flow] = []

    def then() -> None:
        chained.extend(fabric.start(10 * GB, [link]) for _ in range(2))

    fabric.start(10 * GB, [link], on_done=then)
    other = fabric.start(20 * GB, [link])
    fabric.flush()
    relaxes = fabric.relaxes
    core.call_at(2.5, core.stop)
    core.run()
    # the first flow (5 GB/s) ends at t = 2; its end and both starts: one re-share, not three
    assert fabric.relaxes - relaxes == 1
    assert [f.rate for f in (*chained, other)] == pytest.approx([10 * GB / 3] * 3, rel=1e-12)
    assert fabric.flows_completed == 1


def test_real_clock_a_later_start_settles_the_owed_reshare_at_its_own_instant() -> None:
    """Under RealClock two starts are two instants: the second one's entry runs the first
    one's re-share at the first's time, so the schedule stays exact."""
    rate, size = 1e9, 0.5e9

    async def main() -> tuple[Flow, Flow]:
        fabric = Fabric(RealClock(dilation=4.0))
        link = fabric.add_link("l", rate)
        busy = fabric.start(1.0e9, [link])  # keeps the link busy: no idle shortcut below
        first = fabric.start(size, [link])
        time.sleep(0.02)  # the owed re-share's callback cannot run before the next start
        second = fabric.start(size, [link])
        while not (first.done and second.done):
            await asyncio.sleep(0.005)
        busy.cancel()
        return first, second

    first, second = asyncio.run(main())
    assert first.finished_at is not None and second.finished_at is not None
    t1, t2 = first.started_at, second.started_at
    assert t2 - t1 >= 0.08  # 0.02 wall seconds, dilated 4x
    # first shares with `busy` at rate/2 until t2, then three flows at rate/3 each
    left = size - rate / 2 * (t2 - t1)
    assert left > 0
    assert first.finished_at == pytest.approx(t2 + left / (rate / 3), rel=1e-9)
