"""The asyncio pacer of real payloads (runtimes/process/serving/pacing.py): the rate formula's
direction,
which VLs a link serves first, and the shell following its pure model on a real loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from dualpath.model.core.clock import VirtualClock, VirtualTimeLoop
from dualpath.model.links import Fabric, paper_cnic_arbitration
from dualpath.runtimes.process.serving.pacing import (
    LinkPace,
    Pacer,
    link_paces,
    node_pacer,
    paced_rate,
)

KIB = 1024


def test_rate_is_line_rate_times_scale_times_dilation() -> None:
    # --speedup 2 = 2 emulated s per wall s: twice the emulated bytes per wall second
    assert paced_rate(50e9, 1e-3, 2.0) == pytest.approx(1e8)
    assert paced_rate(50e9, 1e-3, 0.5) == pytest.approx(2.5e7)


def test_a_cnic_serves_its_high_table_first_and_no_payload_means_no_pacer() -> None:
    loop = VirtualTimeLoop()
    try:
        check_paces(Fabric(VirtualClock(loop)))
    finally:
        loop.close()


def check_paces(fabric: Fabric) -> None:
    links = {
        "n0.snic.rx": fabric.add_link("n0.snic.rx", 50e9),
        "n0.gpu0.cnic.tx": fabric.add_link("n0.gpu0.cnic.tx", 50e9, paper_cnic_arbitration()),
        "n0.flat.tx": fabric.add_link("n0.flat.tx", 25e9, paper_cnic_arbitration(False)),
    }
    paces = link_paces(links, 1e-3, 1.0)
    assert paces["n0.gpu0.cnic.tx"] == LinkPace(5e7, frozenset({0, 1, 3}))
    assert paces["n0.snic.rx"].high_vls == paces["n0.flat.tx"].high_vls == frozenset()
    assert node_pacer(links, 0.0, 1.0) is None
    p = node_pacer(links, 1e-3, 1.0)
    assert p is not None and p.bottleneck(list(links)) == "n0.flat.tx"
    with pytest.raises(ValueError, match=r"n9\.dram"):
        p.rate("n9.dram")


def pacer(rate: float = 4e6, chunk: int = 64 * KIB) -> Pacer:
    return Pacer({"l": LinkPace(rate, frozenset({0}))}, chunk_bytes=chunk, burst_s=0.0)


@pytest.mark.asyncio
async def test_a_backlog_never_goes_faster_than_the_rate() -> None:
    p = pacer()
    t0 = time.perf_counter()
    for _ in range(12):
        await p.pace("l", 2, 64 * KIB)
    elapsed = time.perf_counter() - t0
    assert elapsed >= 11 * 64 * KIB / 4e6 - 0.001  # the first chunk is the bucket's burst
    stats = p.stats()["l"]
    assert stats["sends"] == 12 and stats["bytes"] == 12 * 64 * KIB


@pytest.mark.asyncio
async def test_a_high_vl_send_overtakes_queued_low_sends_on_a_real_loop() -> None:
    p = pacer()
    order: list[str] = []

    async def send(name: str, vl: int) -> None:
        await p.pace("l", vl, 64 * KIB)
        order.append(name)

    await p.pace("l", 2, 64 * KIB)  # empty the bucket: the next sends all queue
    lows = [asyncio.ensure_future(send(f"low{i}", 2)) for i in range(3)]
    await asyncio.sleep(0)  # the lows are queued
    await send("high", 0)
    await asyncio.gather(*lows)
    assert order == ["high", "low0", "low1", "low2"]


@pytest.mark.asyncio
async def test_a_cancelled_sender_leaves_the_queue_and_the_next_goes() -> None:
    p = pacer()
    await p.pace("l", 2, 64 * KIB)
    first = asyncio.ensure_future(p.pace("l", 2, 64 * KIB))
    second = asyncio.ensure_future(p.pace("l", 2, 64 * KIB))
    await asyncio.sleep(0)  # a yield, not a wait: both sends queue
    first.cancel()
    await second
    assert first.cancelled() and p.wire("l").buckets.waiting() == 0


@pytest.mark.asyncio
async def test_a_stream_is_cut_into_chunks_each_waiting_for_tokens() -> None:
    p = pacer(rate=8e6, chunk=32 * KIB)
    sizes = [n async for n in p.chunks("l", 2, 100 * KIB)]
    assert sizes == [32 * KIB, 32 * KIB, 32 * KIB, 4 * KIB]
    assert p.stats()["l"]["sends"] == 4
