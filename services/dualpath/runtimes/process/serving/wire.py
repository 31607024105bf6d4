"""Conversions between the core's objects and their protobuf messages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from dualpath.model.blocks import BlockRange, ChainRegistry
from dualpath.model.blocks.chain import Fork
from dualpath.model.entities.request import EngineState, ReadPath, Request
from dualpath.rpc.v1 import kv_pb2, node_pb2

_PATH_TO_WIRE = {ReadPath.PE: node_pb2.READ_PATH_PE, ReadPath.DE: node_pb2.READ_PATH_DE}
_PATH_FROM_WIRE = {v: k for k, v in _PATH_TO_WIRE.items()}


def lineage_to_wire(chains: ChainRegistry, session: int) -> list[kv_pb2.Fork]:
    """The session's forks, root first: what a receiver needs to compute its digests."""
    return [
        kv_pb2.Fork(session=f.session, parent=f.parent, at=f.at) for f in chains.lineage(session)
    ]


def declare_from_wire(chains: ChainRegistry, lineage: Iterable[kv_pb2.Fork]) -> None:
    """Declare received forks here (idempotent; a conflicting one raises ValueError)."""
    for f in lineage:
        chains.declare(Fork(int(f.session), int(f.parent), int(f.at)))


def range_to_wire(rng: BlockRange, chains: ChainRegistry) -> kv_pb2.BlockRange:
    return kv_pb2.BlockRange(
        session=rng.session,
        start=rng.start,
        stop=rng.stop,
        lineage=lineage_to_wire(chains, rng.session),
    )


def range_from_wire(msg: kv_pb2.BlockRange, chains: ChainRegistry) -> BlockRange:
    declare_from_wire(chains, msg.lineage)
    return BlockRange(int(msg.session), int(msg.start), int(msg.stop))


def request_to_wire(req: Request, chains: ChainRegistry) -> node_pb2.TurnRequest:
    assert req.pe is not None and req.de is not None
    return node_pb2.TurnRequest(
        lineage=lineage_to_wire(chains, req.session),
        rid=req.rid,
        session=req.session,
        turn=req.turn,
        prompt=req.prompt,
        gen=req.gen,
        arrival=req.arrival,
        hit=req.hit,
        pe=req.pe.engine_id,
        de=req.de.engine_id,
        path=_PATH_TO_WIRE[req.path],
        computed=req.computed,
        persisted_blocks=req.persisted_blocks,
        hbm_bytes=req.hbm_bytes,
        buffer_bytes=req.buffer_bytes,
        t_pe=req.t_pe,
        t_de=req.t_de,
        t_read_start=req.t_read_start,
        t_read_done=req.t_read_done,
        t_first=req.t_first,
        attempt=req.attempt,
    )


def request_from_wire(
    msg: node_pb2.TurnRequest, engines: dict[str, EngineState], chains: ChainRegistry
) -> Request:
    """Rebuild a request in this process, pointing at this process's engine objects."""
    declare_from_wire(chains, msg.lineage)
    for eid in (msg.pe, msg.de):
        if eid not in engines:
            raise ValueError(f"request {msg.rid}: unknown engine {eid!r} (different scenario?)")
    return Request(
        rid=int(msg.rid),
        session=int(msg.session),
        turn=int(msg.turn),
        prompt=int(msg.prompt),
        gen=int(msg.gen),
        arrival=msg.arrival,
        done=asyncio.get_running_loop().create_future(),
        hit=int(msg.hit),
        pe=engines[msg.pe],
        de=engines[msg.de],
        path=_PATH_FROM_WIRE.get(msg.path, ReadPath.PE),
        computed=int(msg.computed),
        persisted_blocks=int(msg.persisted_blocks),
        hbm_bytes=msg.hbm_bytes,
        buffer_bytes=msg.buffer_bytes,
        t_pe=msg.t_pe,
        t_de=msg.t_de,
        t_read_start=msg.t_read_start,
        t_read_done=msg.t_read_done,
        t_first=msg.t_first,
        attempt=int(msg.attempt),
    )
