"""runtimes/process/serving/node.py, in process: a decode node's RPCs refuse what is not theirs (an
engine of
another node, a link it does not own, a payload of the wrong size) and an attempt the
scheduler abandoned, whose buffer `Release` gave back; a read that comes before the node
knows its peers waits for them, within its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
import pytest

from dualpath.model.blocks import BlockRange
from dualpath.model.core.clock import RealClock
from dualpath.model.entities.request import Request
from dualpath.rpc.v1 import kv_pb2, node_pb2
from dualpath.runtimes.process.control import Member
from dualpath.runtimes.process.serving import payload
from dualpath.runtimes.process.serving.node import NodeShell
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.peers import Peers
from dualpath.runtimes.process.serving.wire import range_to_wire, request_to_wire
from dualpath.runtimes.process.serving.world import build_world
from tests.runtimes.process.serving.conftest import scenario


class AbortedError(Exception):
    """What `context.abort` raises in a real server: the call ends with this status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class Context:
    def __init__(self, remaining: float | None = None) -> None:
        self.remaining = remaining

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise AbortedError(code, details)

    def time_remaining(self) -> float | None:
        return self.remaining


CTX: Any = Context()


def _node(test: Callable[[NodeShell], Awaitable[None]], name: str = "decode0") -> None:
    async def main() -> None:
        clock = RealClock()
        role, index = name.rstrip("0123456789"), int(name[-1])
        opts = ServeOptions(role=role, redis_url="redis://127.0.0.1:1/0", node=index)
        shell = NodeShell(opts, build_world(scenario(), clock, name))
        try:
            await test(shell)
        finally:
            await shell.stop()

    asyncio.run(main())


def _turn(shell: NodeShell, rid: int, buffer_bytes: float = 0.0) -> node_pb2.TurnRequest:
    """A turn placed on prefill0's first engine and this node's first engine."""
    pe = shell.engines["prefill0.gpu0"]
    de = next(e for e in shell.engines.values() if e.node.name == shell.name)
    req = Request(rid, rid, 0, 1000, 8, 0.0, asyncio.get_running_loop().create_future())
    req.pe, req.de, req.buffer_bytes = pe, de, buffer_bytes
    return request_to_wire(req, shell.ctx.chains)


def test_a_node_the_scenario_does_not_have_is_refused() -> None:
    async def build() -> None:
        opts = ServeOptions(role="decode", redis_url="redis://127.0.0.1:1/0", node=5)
        NodeShell(opts, build_world(scenario(), RealClock(), "decode5"))

    with pytest.raises(ValueError, match="--node 5: the scenario has no node 'decode5'"):
        asyncio.run(build())


def test_release_gives_an_abandoned_attempts_buffer_back_and_refuses_it_later() -> None:
    async def test(shell: NodeShell) -> None:
        buffer = shell.node_hw.buffer
        await buffer.acquire(4e6)  # what the attempt's read reserved here
        assert shell.reservations.hold((7, 0), 4e6)
        reply = await shell.Release(node_pb2.ReleaseRequest(request_id=7, attempt=0), CTX)
        assert reply.released_bytes == 4e6 and buffer.used == 0.0
        assert shell.stats()["buffer_released_bytes"] == 4e6
        with pytest.raises(AbortedError, match="FAILED_PRECONDITION: turn 7 abandoned"):
            await shell.Receive(_turn(shell, 7), CTX)  # its hand-over arrives late
        second = await shell.Release(node_pb2.ReleaseRequest(request_id=7, attempt=0), CTX)
        assert second.released_bytes == 0.0  # idempotent

    _node(test)


def test_a_hand_over_without_its_reservation_is_refused() -> None:
    async def test(shell: NodeShell) -> None:
        with pytest.raises(AbortedError, match="turn 3 abandoned"):
            await shell.Receive(_turn(shell, 3, buffer_bytes=1e6), CTX)
        await shell.node_hw.buffer.acquire(1e6)
        shell.reservations.hold((3, 0), 1e6)
        await shell.Receive(_turn(shell, 3, buffer_bytes=1e6), CTX)
        assert not shell.reservations.holds((3, 0))  # consumed: the unit frees it itself

    _node(test)


def test_work_for_another_nodes_engine_is_refused() -> None:
    async def test(shell: NodeShell) -> None:
        with pytest.raises(AbortedError, match=r"FAILED_PRECONDITION: prefill0\.gpu0 not here"):
            await shell.Enqueue(_turn(shell, 1), CTX)  # a decode node runs no prefill
        assert shell.health() == {"service": "decode0", "engines": len(shell.unit_of)}

    _node(test)


def test_charges_only_for_owned_links_with_the_announced_payload() -> None:
    async def test(shell: NodeShell) -> None:
        mine = next(n for n in shell.world.cluster.hw.fabric.links if n.startswith("decode0."))
        theirs = next(n for n in shell.world.cluster.hw.fabric.links if n.startswith("prefill0."))
        with pytest.raises(AbortedError, match=r"INVALID_ARGUMENT: links .* not owned by decode0"):
            await shell.Charge(kv_pb2.ChargeRequest(links=[theirs], nbytes=1e3, vl=2), CTX)
        extra = payload.make(2, 10)  # virtual payloads: a charge carries no bytes
        with pytest.raises(AbortedError, match="10 payload bytes, expected 0"):
            await shell.Charge(
                kv_pb2.ChargeRequest(links=[mine], nbytes=1e3, vl=2, payload=extra), CTX
            )
        reply = await shell.Charge(kv_pb2.ChargeRequest(links=[mine], nbytes=1e3, vl=2), CTX)
        assert reply.done_at_s > 0
        assert shell.world.cluster.hw.fabric.links[mine].bytes_total == pytest.approx(1e3)

    _node(test)


def _read(shell: NodeShell, rid: int) -> node_pb2.ReadKvRequest:
    """A DE-side read of 4 blocks that reserves 1 MB of this node's buffer."""
    rng = range_to_wire(BlockRange(rid, 0, 4), shell.ctx.chains)
    return node_pb2.ReadKvRequest(request_id=rid, reserve_bytes=1e6, range=rng, nbytes=1e6, vl=2)


def test_a_read_before_the_node_knows_its_peers_waits_for_them_within_its_deadline() -> None:
    """A restarted node serves gRPC once registered, before it knows its peers (host.py):
    a read sent then waits, and at its deadline is UNAVAILABLE (the scheduler places the
    turn elsewhere), holding nothing. It used to trip an assertion, which stopped the node
    (found by `python -m dualpath.runtimes.process.launcher.nemesis`)."""

    async def test(shell: NodeShell) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(AbortedError, match="UNAVAILABLE: decode0 is starting"):
            await shell.ReadKv(_read(shell, 5), Context(remaining=0.25))
        assert loop.time() - t0 >= 0.15  # it waited for its peers first
        assert shell.node_hw.buffer.used == 0.0 and not shell.reservations.holds((5, 0))

    _node(test)


def test_a_read_waiting_for_the_peers_goes_on_once_they_are_known() -> None:
    async def test(shell: NodeShell) -> None:
        read = asyncio.ensure_future(shell.ReadKv(_read(shell, 6), Context(remaining=30.0)))
        await asyncio.sleep(0.1)
        assert not read.done()
        peers = Peers()  # a storage that is not there: the read reaches it and says so
        peers.update([Member("storage", "storage", "127.0.0.1:1", "127.0.0.1:1")])
        try:
            await shell.on_peers(peers)
            reply = await asyncio.wait_for(read, 10.0)
        finally:
            await peers.close()
        assert reply.error_kind == "unavailable", reply

    _node(test)
