"""The fabric's shortcuts change cost, never results: an event recomputes only what it touches,
and every shortcut reproduces the general cascade bit for bit."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links import Fabric, Flow, Link, paper_cnic_arbitration, saturated_shares

GB = 1e9
N_LINKS = 6

flow_st = st.tuples(
    st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.25, 2.0]),  # start time (ties: same-instant bursts)
    st.floats(1.0, 400.0),  # bytes
    st.lists(st.integers(0, N_LINKS - 1), min_size=1, max_size=4, unique=True),  # hops
    st.sampled_from([0, 2]),  # VL
    st.booleans(),  # cancel half-way?
)


def _run(
    rates: list[float], flows: list[tuple[float, float, list[int], int, bool]], shortcut: bool
) -> list[Any]:
    """Everything observable: each flow's finish, rate at start and remaining bytes; each link's
    counters and series (exact floats, compared with ==)."""

    async def main(clock: VirtualClock) -> list[Any]:
        fabric = Fabric(clock, bucket_s=0.25)
        fabric.idle_shortcut = shortcut
        arb = paper_cnic_arbitration()
        links = [
            fabric.add_link(f"l{i}", r, arb if i % 3 == 1 else None) for i, r in enumerate(rates)
        ]
        started: list[tuple[int, Flow, float]] = []

        def launch(idx: int, nbytes: float, hops: list[Link], vl: int, cancel: bool) -> None:
            flow = fabric.start(nbytes, hops, vl)
            started.append((idx, flow, flow.rate))
            if cancel:
                clock.call_at(clock.now() + 0.5 * nbytes / max(rates), flow.cancel)

        # One callback per instant, launching in index order: asyncio's heap does not keep
        # equal-time timers in order, and the fabric's own timers (a flush, a re-arm) differ
        # between the two paths, which would reorder a burst's starts.
        bursts: dict[float, list[tuple[int, float, list[Link], int, bool]]] = {}
        for idx, (at, nbytes, hop_ids, vl, cancel) in enumerate(flows):
            hops = [links[h] for h in hop_ids]
            bursts.setdefault(at, []).append((idx, nbytes, hops, vl, cancel))
        for at, burst in bursts.items():
            clock.call_at(at, functools.partial(_launch_all, launch, burst))
        await clock.sleep(2.0 + 1e-9)
        while fabric.active_flows:
            await clock.sleep(1.0)
        out: list[Any] = [
            (i, f.finished_at, rate, f.remaining, f.done)
            for i, f, rate in sorted(started, key=lambda x: x[0])
        ]
        out += [(ln.bytes_total, ln.busy_s, ln.bytes_by_vl, ln.series()) for ln in links]
        return out

    result: list[Any] = run_virtual(main)
    return result


def _launch_all(
    launch: Callable[[int, float, list[Link], int, bool], None],
    burst: list[tuple[int, float, list[Link], int, bool]],
) -> None:
    for args in burst:
        launch(*args)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rates=st.lists(
        st.sampled_from([10.0, 50.0, 50.0, 120.0, 500.0]), min_size=N_LINKS, max_size=N_LINKS
    ),
    flows=st.lists(flow_st, min_size=1, max_size=30),
)
def test_idle_shortcut_equals_the_general_cascade_bit_for_bit(
    rates: list[float], flows: list[tuple[float, float, list[int], int, bool]]
) -> None:
    assert _run(rates, flows, shortcut=True) == _run(rates, flows, shortcut=False)


def test_a_flow_on_idle_links_costs_one_step_per_hop_and_nothing_to_finish() -> None:
    async def main(clock: VirtualClock) -> tuple[int, int, float]:
        fabric = Fabric(clock)
        dram = fabric.add_link("dram", 500 * GB)
        tx = fabric.add_link("tx", 50 * GB, paper_cnic_arbitration())
        rx = fabric.add_link("rx", 25 * GB, paper_cnic_arbitration())
        flow = fabric.start(5 * GB, [dram, tx, rx], vl=2)
        at_start = fabric.relax_steps
        await clock.sleep(1.0)
        assert flow.done
        return at_start, fabric.relax_steps, flow.rate

    at_start, at_end, rate = run_virtual(main)
    assert at_start == 3  # its three hops, in closed form
    assert at_end == 3  # leaving idle links re-shares nothing
    assert rate == 0.0  # a finished flow has no rate


def test_finishing_recomputes_only_the_links_it_shared() -> None:
    """Two flows share `shared`; the short one also crosses `own`. When it ends, only `shared`
    (the link with a flow left) is recomputed; `own` goes idle without a recomputation."""

    async def main(clock: VirtualClock) -> tuple[int, float]:
        fabric = Fabric(clock)
        shared = fabric.add_link("shared", 10 * GB)
        own = fabric.add_link("own", 10 * GB)
        long = fabric.start(100 * GB, [shared])
        fabric.start(1 * GB, [shared, own])
        fabric.flush()  # the starts' re-share, owed until the end of this instant
        before = fabric.relax_steps
        await clock.sleep(0.5)  # the short flow (5 GB/s) ends at 0.2 s
        return fabric.relax_steps - before, long.rate

    steps, rate = run_virtual(main)
    assert steps == 1
    assert rate == 10 * GB


def test_set_rate_on_an_arbitrated_link_does_not_reuse_old_splits() -> None:
    async def main(clock: VirtualClock) -> list[float]:
        fabric = Fabric(clock)
        cnic = fabric.add_link("cnic", 50 * GB, paper_cnic_arbitration())
        kv = fabric.start(1e6 * GB, [cnic], vl=2)
        model = fabric.start(1e6 * GB, [cnic], vl=0)
        rates = [kv.rate, model.rate]
        fabric.set_rate(cnic, 25 * GB)
        return [*rates, kv.rate, model.rate]

    shares = saturated_shares(paper_cnic_arbitration(), [0, 2])
    got = run_virtual(main)
    assert got == pytest.approx(
        [shares[2] * 50 * GB, shares[0] * 50 * GB, shares[2] * 25 * GB, shares[0] * 25 * GB],
        rel=1e-12,
    )


def test_the_arbitration_memo_grows_with_the_arbitrated_links() -> None:
    """Sized for one 2P4D unit (96 CNIC directions), a fixed memo was cleared so often at
    48P96D (2,304) that its hits collapsed; it now keeps 32 splits per arbitrated link."""

    async def main(clock: VirtualClock) -> tuple[int, int]:
        fabric = Fabric(clock)
        arb = paper_cnic_arbitration()
        for i in range(96):
            fabric.add_link(f"unit.gpu{i}", GB, arb)
            fabric.add_link(f"unit.dram{i}", GB)  # not arbitrated: not counted
        small = fabric._sharer.memo_max
        for i in range(2304 - 96):
            fabric.add_link(f"big.gpu{i}", GB, arb)
        return small, fabric._sharer.memo_max

    assert run_virtual(main) == (4096, 32 * 2304)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1.0, 2.0, 3.0, 6.0]), st.integers(1, 3)), min_size=2, max_size=4
    )
)
def test_hops_are_ordered_as_a_stable_sort_by_fair_share(shape: list[tuple[float, int]]) -> None:
    """`join` visits a flow's hops slowest fair share first; the hand-written order for two
    and three hops is the stable sort's, ties included (equal shares keep the path's order)."""
    from dualpath.model.links.passes import by_fair_share, fair_share

    async def main(clock: VirtualClock) -> None:
        fabric = Fabric(clock)
        hops = []
        for i, (rate, members) in enumerate(shape):
            link = fabric.add_link(f"l{i}", rate * GB)
            link.members = dict.fromkeys(range(members), 0)  # type: ignore[arg-type]
            hops.append(link)
        assert list(by_fair_share(tuple(hops))) == sorted(hops, key=fair_share)

    run_virtual(main)
