"""Leaving out links that cannot bind (model/links/cover.py) changes no rate: on many seeded
random fabrics, after every start and every cancel, each flow's rate equals the full
re-share's within 1e-9 relative."""

from __future__ import annotations

import random

import pytest

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links import Fabric, Flow, Link, paper_cnic_arbitration

GB = 1e9
SEEDS = 200
BLOCK = 20
EVENTS = 40


def _topology(
    rng: random.Random, fabric: Fabric, isolation: bool
) -> tuple[list[list[Link]], list[Link]]:
    """A small cluster (storage, per node SNIC/DRAM/CNICs, storage targets) plus a few links
    of random rates; returns path templates and the random links."""
    arb = paper_cnic_arbitration(isolation=isolation)
    nodes = rng.randint(1, 4)
    snic = rng.choice([25.0, 50.0]) * GB
    storage = rng.choice([1.5, 1.0, 0.6]) * nodes * snic
    s_read, s_write = fabric.add_link("s.read", storage), fabric.add_link("s.write", storage)
    targets = [fabric.add_link(f"s.t{i}", storage / 2) for i in range(2)]
    paths: list[list[Link]] = []
    per_node = []
    for n in range(nodes):
        rx, tx = fabric.add_link(f"n{n}.rx", snic), fabric.add_link(f"n{n}.tx", snic)
        dram = fabric.add_link(f"n{n}.dram", rng.choice([500.0, 200.0, 100.0]) * GB)
        gpus = [
            (
                fabric.add_link(f"n{n}.g{g}.tx", 50 * GB, arb),
                fabric.add_link(f"n{n}.g{g}.rx", 50 * GB, arb),
            )
            for g in range(2)
        ]
        per_node.append((rx, tx, dram, gpus))
    for rx, tx, dram, gpus in per_node:
        paths += [[s_read, rx, dram]] + [[t, rx, dram] for t in targets]
        for g_tx, g_rx in gpus:
            paths += [[g_tx, dram, tx, s_write], [dram, g_rx]]
            for *_, o_dram, o_gpus in per_node:
                if o_dram is not dram:
                    paths += [[g_tx, o_gpus[0][1], o_dram], [dram, g_tx, o_gpus[1][1]]]
    extra = [
        fabric.add_link(f"x{i}", rng.choice([10.0, 50.0, 120.0, 500.0, 2000.0]) * GB)
        for i in range(rng.randint(0, 4))
    ]
    return paths, extra


def _rates(seed: int, leave_out: bool, isolation: bool) -> tuple[list[list[float]], int]:
    """Every active flow's rate after each event; and how often a link was left out."""

    async def main(clock: VirtualClock) -> tuple[list[list[float]], int]:
        rng = random.Random(seed)
        fabric = Fabric(clock, bucket_s=None, max_cascade=10**6)  # both cascades converge
        fabric.leave_out_inert = leave_out
        paths, extra = _topology(rng, fabric, isolation)
        every = list(fabric.links.values())
        flows: list[Flow] = []
        seen: list[list[float]] = []
        inert = 0
        for _ in range(EVENTS):
            await clock.sleep(rng.choice([0.0, 0.0, 1e-3]))
            live = [f for f in flows if not f.cancelled]
            if live and rng.random() < 0.3:
                rng.choice(live).cancel()
            else:
                if extra and rng.random() < 0.3:
                    hops = rng.sample(every, rng.randint(1, min(4, len(every))))
                else:
                    hops = list(rng.choice(paths))
                    if extra and rng.random() < 0.3:
                        hops.append(rng.choice([x for x in extra if x not in hops] or hops[:1]))
                        hops = list(dict.fromkeys(hops))
                vl = rng.choice([0, 2])
                flows.append(fabric.start(1e6 * GB, hops, vl))  # none finishes in the test
            seen.append([f.rate for f in flows if not f.cancelled])
            inert += sum(link.inert for link in every)
        if leave_out:  # bring every left-out link back: the re-share keeps every rate
            fabric._sharer.stop_covering(every)
            fabric._relax(fabric.now())
            seen.append([f.rate for f in flows if not f.cancelled])
        return seen, inert

    result: tuple[list[list[float]], int] = run_virtual(main)
    return result


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        abs(x - y) <= 1e-9 * max(abs(x), abs(y)) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("block", range(SEEDS // BLOCK))
def test_leaving_out_links_that_cannot_bind_changes_no_rate(block: int) -> None:
    """Plain fabrics: max-min has one answer, and leaving links out finds it."""
    left_out = 0
    for seed in range(block * BLOCK, (block + 1) * BLOCK):
        full, _ = _rates(seed, leave_out=False, isolation=False)
        fast, inert = _rates(seed, leave_out=True, isolation=False)
        left_out += inert
        assert len(fast) == len(full) + 1
        for step, (a, b) in enumerate(zip(full, fast, strict=False)):
            assert _close(a, b), (seed, step, a, b)
        assert _close(fast[-2], fast[-1]), seed
    assert left_out > 0  # the shortcut ran


@pytest.mark.parametrize("block", range(SEEDS // BLOCK))
def test_with_vl_arbitration_the_left_out_links_bind_no_one(block: int) -> None:
    """The paper's CNICs: the allocation reached leaving links out is one the full re-share
    keeps when they all come back (docs/links.md, "Links that cannot bind", (4))."""
    left_out = 0
    for seed in range(block * BLOCK, (block + 1) * BLOCK):
        fast, inert = _rates(seed, leave_out=True, isolation=True)
        left_out += inert
        assert _close(fast[-2], fast[-1]), seed
    assert left_out > 0


def test_a_storage_link_faster_than_all_snics_is_left_out() -> None:
    async def main(clock: VirtualClock) -> tuple[bool, bool, float]:
        fabric = Fabric(clock)
        storage = fabric.add_link("storage", 200 * GB)
        snics = [fabric.add_link(f"snic{i}", 50 * GB) for i in range(3)]
        flows = [fabric.start(1e3 * GB, [storage, s]) for s in snics for _ in range(2)]
        left_out = storage.inert
        fabric.start(1e3 * GB, [storage])  # a flow no other hop bounds: it may bind now
        return left_out, storage.inert, flows[0].rate

    left_out, after, rate = run_virtual(main)
    assert left_out and not after
    assert rate == 25 * GB  # its SNIC's half, whether the storage link was in or out
