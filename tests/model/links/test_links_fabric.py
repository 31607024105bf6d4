"""Fabric semantics on the virtual clock: sharing, re-sharing, multi-hop, DRAM, VL isolation."""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dualpath.bench.links import bench_fabric
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links import Fabric, Flow, Link, VlArbitration, paper_cnic_arbitration

GB = 1e9
MTU = 4096
CNIC = 50 * GB


def run(body: Callable[[VirtualClock, Fabric], Awaitable[Any]], **kwargs: Any) -> Any:
    async def main(clock: VirtualClock) -> Any:
        return await body(clock, Fabric(clock, **kwargs))

    return run_virtual(main)


async def finish_times(
    clock: VirtualClock, fabric: Fabric, specs: list[tuple[float, float, list[Link]]]
) -> list[float]:
    """Start (at, nbytes, hops) flows at their times; return completion times in spec order."""
    done: dict[int, float] = {}

    def launch(idx: int, nbytes: float, hops: list[Link]) -> None:
        def finished() -> None:
            done[idx] = clock.now()

        fabric.start(nbytes, hops, 0, finished)

    for idx, (at, nbytes, hops) in enumerate(specs):
        clock.call_at(at, functools.partial(launch, idx, nbytes, hops))
    while len(done) < len(specs):
        await clock.sleep(0.01)
    return [done[i] for i in range(len(specs))]


def test_lone_transfer_gets_the_configured_rate() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> float:
        snic = fabric.add_link("node0.snic.rx", 50 * GB)
        t0 = clock.now()
        await fabric.transfer(7.5 * GB, [snic])
        return clock.now() - t0

    assert run(body) == pytest.approx(0.15, rel=1e-9)


@pytest.mark.parametrize("n", [2, 5, 17])
def test_equal_concurrent_transfers_finish_together(n: int) -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> list[float]:
        link = fabric.add_link("l", 10 * GB)
        return await finish_times(clock, fabric, [(0.0, 1 * GB, [link])] * n)

    times = run(body)
    assert max(times) - min(times) <= 1e-9
    assert times[0] == pytest.approx(n * 1 * GB / (10 * GB), rel=1e-9)


def test_late_starter_reshares_with_closed_form_times() -> None:
    """A alone until t1, then both at C/2: A ends at t1 + 2(S - C t1)/C, B at 2S/C."""
    size, rate, t1 = 4 * GB, 2 * GB, 0.5

    async def body(clock: VirtualClock, fabric: Fabric) -> list[float]:
        link = fabric.add_link("l", rate)
        return await finish_times(clock, fabric, [(0.0, size, [link]), (t1, size, [link])])

    a_done, b_done = run(body)
    assert a_done == pytest.approx(t1 + 2 * (size - rate * t1) / rate, rel=1e-9)
    assert b_done == pytest.approx(2 * size / rate, rel=1e-9)


def test_multi_hop_flow_runs_at_its_slowest_hop_and_charges_every_hop() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> tuple[float, list[float]]:
        dram = fabric.add_link("de.dram", 500 * GB)
        tx = fabric.add_link("de.gpu0.cnic.tx", 50 * GB)
        rx = fabric.add_link("pe.gpu0.cnic.rx", 25 * GB)
        await fabric.transfer(5 * GB, [dram, tx, rx], vl=2)
        return clock.now(), [link.bytes_total for link in (dram, tx, rx)]

    t, charged = run(body)
    assert t == pytest.approx(0.2, rel=1e-9)
    assert charged == pytest.approx([5 * GB] * 3, rel=1e-9)


def test_half_duplex_dram_splits_between_read_and_write() -> None:
    """Storage → SNIC → DRAM (write) and DRAM → CNIC (read) share the one DRAM link."""

    async def body(clock: VirtualClock, fabric: Fabric) -> tuple[float, float]:
        dram = fabric.add_link("node0.dram", 100 * GB)  # smaller than the NICs on purpose
        snic = fabric.add_link("node0.snic.rx", 400 * GB)
        cnic = fabric.add_link("node0.gpu0.cnic.tx", 400 * GB)
        write = fabric.start(10 * GB, [snic, dram])
        read = fabric.start(10 * GB, [dram, cnic])
        rates = (write.rate, read.rate)
        await clock.sleep(1.0)
        assert dram.bytes_total == pytest.approx(20 * GB, rel=1e-9)
        return rates

    assert run(body) == pytest.approx((50 * GB, 50 * GB), rel=1e-12)


def test_flow_limited_elsewhere_releases_its_share() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> list[float]:
        shared = fabric.add_link("shared", 10 * GB)
        narrow = fabric.add_link("narrow", 1 * GB)
        slow = fabric.start(100 * GB, [shared, narrow])
        fast = fabric.start(100 * GB, [shared])
        rates = [slow.rate, fast.rate]
        other = fabric.start(100 * GB, [narrow])  # halves slow: fast must pick it up
        rates += [slow.rate, fast.rate, other.rate]
        other.cancel()
        rates += [slow.rate, fast.rate]
        return [r / GB for r in rates]

    assert run(body) == pytest.approx([1, 9, 0.5, 9.5, 0.5, 1, 9], rel=1e-9)


def high_vl_delay(arb: VlArbitration, size: float, kv_flows: int) -> float:
    """Completion time of a VL0 transfer of `size` amid saturating VL2 KV flows, minus alone."""

    async def body(clock: VirtualClock, fabric: Fabric) -> float:
        tx = fabric.add_link("de.gpu0.cnic.tx", CNIC, arb)
        rx = fabric.add_link("pe.gpu0.cnic.rx", CNIC, arb)
        for _ in range(kv_flows):
            fabric.start(1000 * GB, [tx, rx], vl=2)
        await clock.sleep(0.01)
        t0 = clock.now()
        await fabric.transfer(size, [tx, rx], vl=0)
        return clock.now() - t0 - size / CNIC

    return float(run(body))


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("size_kb", [64, 128, 256, 512, 960])
def test_isolation_bounds_high_vl_delay_to_one_low_frame(size_kb: int, disjoint: bool) -> None:
    arb = VlArbitration(
        {0: 192, 1: 192, 2: 0, 3: 192},
        {0: 192, 1: 192, 2: 64, 3: 192},
        high_limit=240,
        high_vls_in_low_table=not disjoint,
    )
    for kv in (1, 8):
        delay = high_vl_delay(arb, size_kb * 1024, kv)
        assert 0.0 <= delay <= MTU / CNIC * (1 + 1e-9)


def test_without_isolation_high_vl_delay_grows_with_kv_flows() -> None:
    arb = paper_cnic_arbitration(isolation=False)
    delays = [high_vl_delay(arb, 960 * 1024, kv) for kv in (1, 2, 4, 8)]
    assert all(b > a for a, b in itertools.pairwise(delays))
    assert delays[0] > 10 * MTU / CNIC  # far beyond one frame even with a single KV flow
    assert delays[-1] == pytest.approx(8 * 960 * 1024 / CNIC, rel=1e-9)


@pytest.mark.parametrize(
    ("vls", "expected"),
    [([0, 2], {0: 0.99896, 2: 0.00104}), ([0, 1, 2, 3], {2: 0.000415}), ([2], {2: 1.0})],
)
def test_saturated_vl_shares_on_a_cnic(vls: list[int], expected: dict[int, float]) -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> dict[int, float]:
        cnic = fabric.add_link("cnic", CNIC, paper_cnic_arbitration())
        for vl in vls:
            fabric.start(1e6 * GB, [cnic], vl=vl)
        await clock.sleep(2.0)
        by_vl = cnic.bytes_by_vl
        return {vl: by_vl[vl] / (2.0 * CNIC) for vl in vls}

    shares = run(body)
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-9)
    for vl, share in expected.items():
        assert shares[vl] == pytest.approx(share, abs=1e-5)


def test_cancel_keeps_moved_bytes_and_frees_the_share() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        called: list[str] = []
        victim = fabric.start(10 * GB, [link], on_done=lambda: called.append("victim"))
        other = fabric.start(1 * GB, [link], on_done=lambda: called.append("other"))
        await clock.sleep(1.0)  # each moved 0.5 GB
        victim.cancel()
        victim.cancel()  # idempotent
        assert victim.cancelled and victim.remaining == pytest.approx(9.5 * GB)
        assert other.rate == 1 * GB
        await clock.sleep(2.0)
        assert called == ["other"] and other.finished_at == pytest.approx(1.5)
        assert link.bytes_total == pytest.approx(1.5 * GB, rel=1e-9)
        assert fabric.active_flows == 0 and fabric.flows_cancelled == 1

    run(body)


def test_cancelling_the_awaiting_task_cancels_the_flow() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        task = asyncio.ensure_future(fabric.transfer(10 * GB, [link]))
        await clock.sleep(2.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fabric.active_flows == 0
        assert link.bytes_total == pytest.approx(2 * GB, rel=1e-9)

    run(body)


def test_empty_transfers_complete_later_not_synchronously() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        order: list[str] = []
        flow = fabric.start(0, [link], on_done=lambda: order.append("zero"))
        fabric.start(5, [], on_done=lambda: order.append("no-hops"))
        order.append("caller")
        assert flow.done and fabric.active_flows == 0
        await fabric.transfer(0, [link])
        assert order == ["caller", "zero", "no-hops"]
        assert clock.now() == 0.0 and fabric.flows_started == 3

    run(body)


def test_completion_callback_chains_start_at_the_completion_time() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> list[float]:
        link = fabric.add_link("l", 1 * GB)
        ends: list[float] = []

        def again(k: int) -> None:
            ends.append(clock.now())
            if k:
                fabric.start(0.25 * GB, [link], on_done=lambda: again(k - 1))

        fabric.start(0.25 * GB, [link], on_done=lambda: again(3))
        await clock.sleep(5.0)
        return ends

    assert run(body) == pytest.approx([0.25, 0.5, 0.75, 1.0], rel=1e-12)


def test_link_statistics_and_series() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        await clock.sleep(0.5)
        await fabric.transfer(1.5 * GB, [link])  # busy over [0.5, 2.0]
        await clock.sleep(1.0)
        assert link.busy_s == pytest.approx(1.5)
        assert link.utilization(3.0) == pytest.approx(0.5)
        assert link.series() == pytest.approx([0.5 * GB, 1 * GB, 0.0], abs=1e-3)
        assert link.series(3.0) == pytest.approx([1.5 * GB])
        with pytest.raises(ValueError, match="multiple"):
            link.series(1.5)
        assert link.bytes_by_vl == {0: pytest.approx(1.5 * GB)}

    run(body, bucket_s=1.0)


def test_statistics_extrapolate_between_events() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        flow = fabric.start(10 * GB, [link], vl=2)
        await clock.sleep(2.5)
        assert link.bytes_total == pytest.approx(2.5 * GB)
        assert link.bytes_by_vl == {2: pytest.approx(2.5 * GB)}
        assert flow.remaining == pytest.approx(7.5 * GB)
        assert link.series(0.5) == pytest.approx([0.5 * GB] * 5 + [0.0], abs=1)

    run(body, bucket_s=0.5)


def test_bytes_by_vl_add_up_to_the_links_total_mid_run_and_at_the_end() -> None:
    """Per-VL bytes are charged per flow (when it leaves, and its progress while on the
    link); the total is integrated per rate segment. The two must agree on a busy CNIC with
    two VLs, flows that finish, flows cancelled half way, and a read between events."""

    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        cnic = fabric.add_link("cnic", CNIC, paper_cnic_arbitration())
        dram = fabric.add_link("dram", 2 * CNIC)
        flows = []
        for k in range(12):
            hops = [cnic] if k % 3 else [dram, cnic]
            flows.append(fabric.start((1 + k % 5) * GB, hops, vl=0 if k % 2 else 2))
            await clock.sleep(0.013)
        flows[3].cancel()
        flows[8].cancel()
        await clock.sleep(0.05)  # mid-run: some flows are still on the link
        assert cnic.active_flows > 0
        mid = cnic.bytes_by_vl
        assert set(mid) == {0, 2}
        assert math.fsum(mid.values()) == pytest.approx(cnic.bytes_total, rel=1e-12)
        await clock.sleep(10.0)
        assert cnic.active_flows == 0
        end = cnic.bytes_by_vl
        moved = math.fsum(f.nbytes for f in flows if f.done) + math.fsum(
            f.nbytes - f.remaining for f in flows if f.cancelled
        )
        assert math.fsum(end.values()) == pytest.approx(cnic.bytes_total, rel=1e-12)
        assert math.fsum(end.values()) == pytest.approx(moved, rel=1e-12)
        assert end[0] + end[2] > mid[0] + mid[2]  # it went on moving after the read

    run(body)


def test_set_rate_reshapes_running_flows() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> float:
        link = fabric.add_link("l", 1 * GB)
        done: list[float] = []
        fabric.start(3 * GB, [link], on_done=lambda: done.append(clock.now()))
        await clock.sleep(1.0)
        fabric.set_rate(link, 2 * GB)
        await clock.sleep(5.0)
        return done[0]

    assert run(body) == pytest.approx(2.0, rel=1e-12)


def test_configuration_errors_name_the_problem() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        with pytest.raises(ValueError, match=r"node7\.snic\.rx"):
            fabric.add_link("node7.snic.rx", 0)
        cnic = fabric.add_link("cnic", CNIC, paper_cnic_arbitration())
        with pytest.raises(ValueError, match="already exists"):
            fabric.add_link("cnic", CNIC)
        with pytest.raises(KeyError, match="nope"):
            fabric.link("nope")
        assert fabric.link("cnic") is cnic and list(fabric.links) == ["cnic"]
        with pytest.raises(ValueError, match="VL 5"):
            fabric.start(1, [cnic], vl=5)
        with pytest.raises(ValueError, match="once"):
            fabric.start(1, [cnic, cnic])
        with pytest.raises(ValueError, match="nbytes"):
            fabric.start(-1, [cnic])
        stranger = Fabric(clock).add_link("x", 1.0)
        with pytest.raises(ValueError, match="another fabric"):
            fabric.start(1, [stranger])

    run(body)


def test_same_scenario_is_deterministic() -> None:
    def scenario() -> list[tuple[float | None, float]]:
        async def body(clock: VirtualClock, fabric: Fabric) -> list[tuple[float | None, float]]:
            links = [fabric.add_link(f"l{i}", (i + 1) * GB) for i in range(4)]
            flows: list[Flow] = []
            for k in range(40):
                hops = [links[k % 4], links[(k * 7 + 1) % 4]] if k % 3 else [links[k % 4]]
                hops = list(dict.fromkeys(hops))
                flows.append(fabric.start((k % 5 + 1) * 0.1 * GB, hops))
                await clock.sleep(0.013 * (k % 3))
            await clock.sleep(100.0)
            return [(f.finished_at, links[0].bytes_total) for f in flows]

        return list(run(body))

    assert scenario() == scenario()
    assert math.isfinite(scenario()[0][0] or math.nan)


def test_a_raising_callback_does_not_starve_the_rest_of_its_batch() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        errors: list[BaseException | None] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, ctx: errors.append(ctx.get("exception"))
        )
        link = fabric.add_link("l", 1 * GB)
        called: list[int] = []

        def boom() -> None:
            raise RuntimeError("callback bug")

        fabric.start(1 * GB, [link], on_done=boom)
        fabric.start(1 * GB, [link], on_done=lambda: called.append(2))
        later = fabric.start(3 * GB, [link], on_done=lambda: called.append(3))
        await clock.sleep(10.0)
        assert called == [2, 3] and later.finished_at == pytest.approx(5.0)
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)

    run(body)


def test_series_can_be_disabled_without_losing_totals() -> None:
    async def body(clock: VirtualClock, fabric: Fabric) -> None:
        link = fabric.add_link("l", 1 * GB)
        await fabric.transfer(1 * GB, [link])
        assert link.bytes_total == pytest.approx(1 * GB)
        with pytest.raises(ValueError, match="disabled"):
            link.series()

    run(body, bucket_s=None)


def test_bench_runs_and_reports_counters() -> None:
    result = bench_fabric(n_flows=2_000, concurrency=50, nodes=2, gpus=4)
    assert result["flows"] == 2_000
    assert result["flows_per_s"] > 0 and result["emulated_s"] > 0
