"""model/links/snapshot.py: a link's counters carried from a service process to the report."""

from __future__ import annotations

import asyncio

import pytest

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.links import Fabric
from dualpath.model.links.link import LinkCounters
from dualpath.model.links.snapshot import restore, snapshot


def test_link_snapshot_restores_counters_and_drops_the_idle_prefix() -> None:
    async def main(clock: VirtualClock) -> None:
        f = Fabric(clock, bucket_s=1.0)
        a = f.add_link("a", 100.0)
        await clock.sleep(3.0)
        done = asyncio.get_running_loop().create_future()
        f.start(200.0, [a], 2, lambda: done.set_result(None))
        await done
        snap = snapshot(a)
        b = Fabric(clock, bucket_s=1.0).add_link("a", 100.0)
        restore(b, snap, skip_s=3.0)
        assert b.bytes_total == pytest.approx(200.0) and b.bytes_by_vl == {2: pytest.approx(200.0)}
        assert b.series()[:2] == [pytest.approx(100.0), pytest.approx(100.0)]

    run_virtual(main)


def test_link_counters_round_trip_through_the_links_public_methods() -> None:
    """`Link.counters` and `Link.restore`: what snapshot/restore carry, without the msgpack
    form; a link with flows refuses a restore, naming itself."""

    async def main(clock: VirtualClock) -> None:
        f = Fabric(clock, bucket_s=1.0)
        a = f.add_link("a", 100.0)
        done = asyncio.get_running_loop().create_future()
        f.start(150.0, [a], 3, lambda: done.set_result(None))
        await done
        c = a.counters()
        approx = pytest.approx
        assert c == LinkCounters(approx(150.0), approx(1.5), {3: approx(150.0)}, [100.0, 50.0])
        b = Fabric(clock, bucket_s=1.0).add_link("b", 100.0)
        b.restore(c)
        assert b.counters() == c
        f.start(1e6, [a], 3, None)
        with pytest.raises(ValueError, match="link 'a' has flows"):
            a.restore(c)

    run_virtual(main)


def test_a_snapshot_with_a_vl_outside_the_data_vls_is_refused_by_name() -> None:
    async def main(clock: VirtualClock) -> None:
        link = Fabric(clock, bucket_s=1.0).add_link("cnic", 100.0)
        bad = {"bytes": 1.0, "busy_s": 1.0, "by_vl": {"15": 1.0}, "series": [1.0]}
        with pytest.raises(ValueError, match=r"link 'cnic': VL 15 is not a data VL \(0\.\.14\)"):
            restore(link, bad)

    run_virtual(main)
