"""runtimes/process/serving/mover.py: a transfer's hops split by the process that owns each link."""

from __future__ import annotations

import asyncio

import pytest

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links import Fabric
from dualpath.runtimes.process.serving.mover import DistributedMover, owner_of


def test_hops_split_by_owner_process() -> None:
    async def main(clock: VirtualClock) -> None:
        f = Fabric(clock)
        names = ("decode0.dram", "decode0.gpu1.cnic.tx", "prefill0.gpu0.cnic.rx", "storage.write")
        hops = [f.add_link(n, 1e9) for n in names]
        calls: list[tuple[str, list[str]]] = []

        async def charge(owner: str, names: list[str], nbytes: float, vl: int) -> None:
            calls.append((owner, names))
            await clock.sleep(2.0)  # the remote side is slower

        m = DistributedMover("decode0", f, charge, lambda e: None)
        local, remote = m.split(hops)
        assert [h.name for h in local] == ["decode0.dram", "decode0.gpu1.cnic.tx"]
        assert remote == {"prefill0": ["prefill0.gpu0.cnic.rx"], "storage": ["storage.write"]}
        done = asyncio.get_running_loop().create_future()
        m.start(1e9, hops, 2, lambda: done.set_result(clock.now()))
        assert await done == pytest.approx(2.0)  # completes with the slowest owner
        assert sorted(o for o, _ in calls) == ["prefill0", "storage"]

    run_virtual(main)
    assert owner_of("prefill12.gpu3.cnic.rx") == "prefill12"
