"""The storage service: the 3FS-like block store and its links (targets, write path).

Reads charge the serving target's link and return the stored digest (the reading node
charges its own SNIC and DRAM and verifies). Writes charge the aggregate write link, are
checked against the producer's digest, and are acknowledged once their blocks are stored
(a range written past a gap waits for it, bounded) and recorded in the Redis block index
(runtimes/process/serving/commit.py), so a restarted store serves every block it acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import redis.asyncio as aioredis

from dualpath.model.blocks import BlockCorrupted, BlockMissing, BlockRange
from dualpath.model.blocks.chain import Fork
from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import RealClock
from dualpath.model.links import Fabric, Link
from dualpath.rpc.v1 import kv_pb2, kv_pb2_grpc
from dualpath.runtimes.process.control import BlockIndex, EventLog
from dualpath.runtimes.process.serving import payload
from dualpath.runtimes.process.serving.commit import IndexCommits
from dualpath.runtimes.process.serving.events import EventSink
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.peers import Ctx
from dualpath.runtimes.process.serving.service import ServiceShell
from dualpath.runtimes.process.serving.stats import base_stats, pack
from dualpath.runtimes.process.serving.wire import declare_from_wire, range_from_wire
from dualpath.runtimes.process.serving.world import World, build_world

# A range written past its owner's stored run waits this long (wall) for the gap before it
# to fill (a write that overtook it, or its node's retry after a storage restart), then is
# refused UNAVAILABLE and sent again by its node: acknowledged blocks are stored blocks.
GAP_WAIT_S = 2.0
DEADLINE_MARGIN_S = 0.05  # an answer must leave before the caller's deadline does


async def charge(fabric: Fabric, links: list[Link], nbytes: float, vl: int) -> None:
    if nbytes <= 0 or not links:
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def finish() -> None:
        if not done.done():
            done.set_result(None)

    fabric.start(nbytes, links, vl, finish)
    await done


def owned(world: World, names: list[str]) -> list[Link]:
    links = world.cluster.hw.fabric.links
    bad = [n for n in names if n not in links or not n.startswith(world.me + ".")]
    if bad:
        raise ValueError(f"links {bad} are not owned by {world.me}")
    return [links[n] for n in names]


class StorageShell(ServiceShell, kv_pb2_grpc.BlockStoreServicer):
    def __init__(
        self, opts: ServeOptions, world: World, index: BlockIndex, events: EventSink
    ) -> None:
        super().__init__()
        self.events = events
        self.opts = opts
        self.world = world
        self.name = "storage"
        self.owned_links = world.owned_links()
        self.ctx = world.cluster.scheduler.ctx
        self.store = self.ctx.store
        self.index = index
        self.commits = IndexCommits(index)
        self._grew = asyncio.Event()  # set (and replaced) whenever a stored run grows
        self._emitted: dict[int, int] = {}  # owner -> the prefix its last event announced
        self.restored_blocks = 0
        self.writes = 0
        self.reads = 0  # Read calls served, and their blocks
        self.read_blocks = 0
        self.writes_refused = 0  # UNAVAILABLE: a gap did not fill, or Redis did not answer

    async def restore(self) -> None:
        """Reload the block index: a restarted store loses no persisted block."""
        chains = self.ctx.chains
        for session, parent, at in await self.index.load_forks():
            chains.declare(Fork(session, parent, at))
        loaded = await self.index.load()
        for session, n in sorted(loaded.items()):
            rng = BlockRange(session, self.store.own_end(session), n)  # the chain's own run
            self.restored_blocks += self.store.persist(rng, chains.expected_digest(rng))
        self.commits.loaded(loaded)

    def add_to(self, server: grpc.aio.Server) -> None:
        kv_pb2_grpc.add_BlockStoreServicer_to_server(self, server)

    # --- RPCs ------------------------------------------------------------------------
    async def Read(  # noqa: N802 (gRPC method name)
        self, request: kv_pb2.ReadBlocksRequest, context: Ctx
    ) -> AsyncIterator[kv_pb2.BlockChunk]:
        try:
            rng = range_from_wire(request.range, self.ctx.chains)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        hw = self.ctx.hw
        link = hw.targets[request.target] if hw.targets else hw.storage_read
        if not self.ctx.policy.oracle:
            await charge(hw.fabric, [link], request.nbytes, request.vl)
        try:
            digest = self.store.read_digest(rng)
        except BlockMissing as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        self.reads += 1  # (a DRAM tier hit never gets here: docs/tier.md)
        self.read_blocks += rng.nblocks
        size = payload.payload_size(request.nbytes, request.payload_scale)
        for piece in payload.chunks(digest, size):
            yield kv_pb2.BlockChunk(payload=piece)
        yield kv_pb2.BlockChunk(digest=digest, last=True)

    async def Write(  # noqa: N802
        self, request: kv_pb2.WriteBlocksRequest, context: Ctx
    ) -> kv_pb2.WriteBlocksReply:
        try:
            self.payload_bytes_verified += payload.verify(request.payload, "persist")
        except payload.PayloadError as exc:
            await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        try:
            ranges = [range_from_wire(msg, self.ctx.chains) for msg in request.ranges]
        except ValueError as exc:
            await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        # A write sent again whose blocks all arrived before (its acknowledgement waited
        # for a gap, or Redis) moves no new bytes: the write link is charged once.
        if not self.ctx.policy.oracle and not all(self.store.received(r) for r in ranges):
            await charge(
                self.ctx.hw.fabric, [self.ctx.hw.storage_write], request.nbytes, request.vl
            )
        added = 0
        parts: list[BlockRange] = []
        try:
            for rng, digest in zip(ranges, request.digests, strict=True):
                added += self._persist(rng, int(digest))
                parts += self.ctx.chains.owner_ranges(rng)
        except (BlockCorrupted, ValueError) as exc:
            await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        self.writes += 1
        await self._acknowledge(parts, context)
        return kv_pb2.WriteBlocksReply(added=added, parked=self.store.parked_blocks())

    async def _acknowledge(self, parts: list[BlockRange], context: Ctx) -> None:
        """Return once every part is stored and in the index, else abort UNAVAILABLE (the
        node sends the write again). Its event says which prefix is now durable."""
        gap = await self._wait_landed(parts, context)
        if gap is not None:
            self.writes_refused += 1
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"{gap} waits behind a gap (blocks before it not written yet); send it again",
            )
        if not await self.commits.commit():
            self.writes_refused += 1
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "the block index could not be written to Redis; send the write again",
            )
        now = self.ctx.clock.now()
        for owner in sorted({p.session for p in parts}):
            durable = self.commits.durable.get(owner, 0)
            if durable > self._emitted.get(owner, 0):  # the history's prefixes only grow
                self._emitted[owner] = durable
                self.events.emit("persisted", now, session=owner, prefix=durable)

    async def _wait_landed(self, parts: list[BlockRange], context: Ctx) -> BlockRange | None:
        """The first part still parked after the wait, or None once all are stored."""
        budget = GAP_WAIT_S
        remaining = context.time_remaining()
        if remaining is not None:
            budget = min(budget, remaining - DEADLINE_MARGIN_S)
        end = asyncio.get_running_loop().time() + budget
        while True:
            gap = next((p for p in parts if self.store.own_end(p.session) < p.stop), None)
            left = end - asyncio.get_running_loop().time()
            if gap is None or left <= 0:
                return gap
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._grew.wait(), left)

    def _persist(self, rng: BlockRange, digest: int) -> int:
        added = self.store.persist_any_order(rng, digest)
        integ = self.ctx.metrics.integrity
        integ.blocks_persisted += added
        integ.bytes_persisted += added * self.ctx.full_block_bytes
        if added:
            lineage = self.ctx.chains.lineage(rng.session)
            forks = {(f.session, f.parent, f.at) for f in lineage}
            for part in self.ctx.chains.owner_ranges(rng):  # the index records owners' runs
                self.commits.mark(part.session, self.store.own_end(part.session), forks)
            self._grew.set()  # wake the writes parked behind a gap
            self._grew = asyncio.Event()
            faults = self.ctx.faults
            if faults.corrupt_left > 0:  # detector self-test (`faults.corrupt_blocks`)
                faults.corrupt_left -= 1
                self.store.corrupt(rng.session, rng.stop - 1)
        return added

    async def Lookup(  # noqa: N802
        self, request: kv_pb2.LookupRequest, context: Ctx
    ) -> kv_pb2.LookupReply:
        try:
            declare_from_wire(self.ctx.chains, request.lineage)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return kv_pb2.LookupReply(
            prefix_blocks=[self.store.prefix_blocks(s) for s in request.sessions]
        )

    async def Charge(  # noqa: N802
        self, request: kv_pb2.ChargeRequest, context: Ctx
    ) -> kv_pb2.ChargeReply:
        try:
            links = owned(self.world, list(request.links))
            self.payload_bytes_verified += payload.verify(request.payload, "charge")
        except (ValueError, payload.PayloadError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        await charge(self.ctx.hw.fabric, links, request.nbytes, request.vl)
        return kv_pb2.ChargeReply(done_at_s=self.ctx.clock.now())

    async def Stats(  # noqa: N802
        self, request: kv_pb2.StatsRequest, context: Ctx
    ) -> kv_pb2.StatsReply:
        return kv_pb2.StatsReply(msgpack=pack(self.stats()))

    # --- index and stats -----------------------------------------------------------------
    async def stop(self) -> None:
        await self.commits.close()
        await self.commits.flush()  # blocks parked at the end land in the index too
        await self.index.close()  # its background retry of writes Redis refused
        await self.events.close()

    def stats(self) -> dict[str, Any]:
        out = base_stats(self.name, self.ctx.clock, self.owned_links, self.ctx.metrics)  # type: ignore[arg-type]
        out["store"] = {
            "parked_blocks": self.store.parked_blocks(),
            "stored_blocks": self.store.stored_blocks,
            "sessions": self.store.sessions,
            "restored_blocks": self.restored_blocks,
            "corrupted": len(self.store.corrupted),
            "writes": self.writes,
            "reads": self.reads,
            "read_blocks": self.read_blocks,
            "writes_refused": self.writes_refused,
            "index_commits": self.commits.rounds,
        }
        out["payload_bytes_verified"] = self.payload_bytes_verified
        return out

    def health(self) -> dict[str, Any]:
        return {"service": self.name, "stored_blocks": self.store.stored_blocks}


async def make_storage(
    opts: ServeOptions, sc: Scenario, clock: RealClock, r: aioredis.Redis
) -> ServiceShell:
    events = EventSink(EventLog(r, opts.run_id, "storage"))
    events.start()
    world = build_world(sc, clock, "storage")
    shell = StorageShell(opts, world, BlockIndex(r, opts.run_id), events)
    await shell.restore()
    return shell
