"""runtimes/process/serving/wire.py: requests and block ranges round-trip through their messages."""

from __future__ import annotations

import asyncio

import pytest

from dualpath.model.blocks import BlockRange, ChainRegistry
from dualpath.model.blocks.chain import Fork
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.runtimes.process.serving.wire import (
    range_from_wire,
    range_to_wire,
    request_from_wire,
    request_to_wire,
)


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
