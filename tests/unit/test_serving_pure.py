"""Pure parts of the process runtime: payload checks, hop ownership, wire round trips,
link snapshots and the event-history checker."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from dualpath.blocks import BlockRange, ChainRegistry
from dualpath.blocks.chain import Fork
from dualpath.cli import app
from dualpath.core.clock import VirtualClock, run_virtual
from dualpath.engines.request import EngineState, NodeState, ReadPath, Request
from dualpath.links import Fabric
from dualpath.links.snapshot import restore, snapshot
from dualpath.report.history import check_history
from dualpath.serving import payload
from dualpath.serving.mover import DistributedMover, owner_of
from dualpath.serving.wire import range_from_wire, range_to_wire, request_from_wire, request_to_wire


def test_payload_checksum_catches_a_flipped_byte() -> None:
    p = payload.make(seed=7, size=1000)
    assert payload.verify(p, "t") == 1000
    bad = bytearray(p.data)
    bad[500] ^= 1
    p.data = bytes(bad)
    with pytest.raises(payload.PayloadError, match="checksum"):
        payload.verify(p, "t")


def test_payload_chunks_reassemble_and_size_is_scaled_and_capped() -> None:
    size = payload.CHUNK_BYTES * 2 + 10
    parts = list(payload.chunks(3, size))
    assert len(parts) == 3 and sum(len(c.data) for c in parts) == size
    assert b"".join(c.data for c in parts) == payload.make(3, size).data
    assert payload.payload_size(1e6, 1e-3) == 1000
    assert payload.payload_size(1e12, 1.0) == payload.MAX_PAYLOAD_BYTES
    assert payload.payload_size(1e6, 0) == 0


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


def test_request_survives_the_wire() -> None:
    async def main(clock: VirtualClock) -> None:
        pe = EngineState("prefill0.gpu0", 0, NodeState("prefill0", "prefill", 0), 0, 0)
        de = EngineState("decode0.gpu1", 1, NodeState("decode0", "decode", 0), 0, 1)
        loop = asyncio.get_running_loop()
        req = Request(5, 1_000_000_001, 3, 4096, 17, 1.5, loop.create_future(), hit=4032)
        req.pe, req.de, req.path, req.t_first = pe, de, ReadPath.DE, 2.25
        sender, receiver = ChainRegistry(), ChainRegistry()
        sender.declare(Fork(7, 3, 2))
        sender.declare(Fork(1_000_000_001, 7, 5))  # the request's chain is a fork of a fork
        engines = {e.engine_id: e for e in (pe, de)}
        back = request_from_wire(request_to_wire(req, sender), engines, receiver)
        assert receiver.lineage(1_000_000_001) == sender.lineage(1_000_000_001)
        assert (back.rid, back.session, back.turn, back.prompt, back.gen) == (
            5,
            1_000_000_001,
            3,
            4096,
            17,
        )
        assert back.pe is pe and back.de is de and back.path is ReadPath.DE
        assert (back.hit, back.t_first, back.arrival) == (4032, 2.25, 1.5)
        with pytest.raises(ValueError, match="unknown engine"):
            request_from_wire(request_to_wire(req, sender), {}, receiver)

    run_virtual(main)


def test_ranges_carry_their_lineage() -> None:
    sender, receiver = ChainRegistry(salt=9), ChainRegistry(salt=9)
    sender.declare(Fork(4, 2, 3))
    rng = BlockRange(4, 0, 6)
    back = range_from_wire(range_to_wire(rng, sender), receiver)
    assert back == rng and receiver.expected_digest(rng) == sender.expected_digest(rng)
    receiver.chain(5)
    bad = range_to_wire(BlockRange(5, 0, 1), sender)
    bad.lineage.add(session=5, parent=2, at=1)  # 5 is in use here as a root chain
    with pytest.raises(ValueError, match="in use"):
        range_from_wire(bad, receiver)


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


def test_history_checker_flags_duplicates_order_and_shrinking_prefixes() -> None:
    good = [
        {"kind": "turn_done", "rid": 1, "session": 9, "turn": 0},
        {"kind": "persisted", "session": 9, "prefix": 4},
        {"kind": "turn_done", "rid": 2, "session": 9, "turn": 1},
        {"kind": "persisted", "session": 9, "prefix": 6},
    ]
    assert check_history(good)["ok"] and check_history(good)["turns_done"] == 2
    assert not check_history([*good, good[0]])["ok"]  # a turn finished twice
    assert not check_history([*good, {"kind": "persisted", "session": 9, "prefix": 5}])["ok"]
    out_of_order = [good[2], good[0]]
    assert not check_history(out_of_order)["session_turns_in_order"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve", "bogus"], "ROLE"),
        (["run", "--speedup", "0"], "--speedup"),
        (["up", "--http-port", "70000"], "--http-port"),
        (["run", "--preset", "nope"], "--preset"),
        (["serve", "storage", "--redis-url", "redis://127.0.0.1:1/0"], "Redis does not answer"),
    ],
)
def test_bad_cluster_input_is_one_line_not_a_traceback(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code in (1, 2), res.output
    assert needle in res.output and "Traceback" not in res.output
