"""A node's storage I/O: the SNIC side of a KV read (verified where it lands) and the
decode engines' persists, which cross into the storage process."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from dualpath.model.blocks import BlockRange
from dualpath.model.engines.context import EngineContext, RequestHook
from dualpath.model.engines.decode import DecodeUnit, ProgressHook
from dualpath.model.entities.request import EngineState
from dualpath.rpc.v1 import kv_pb2, node_pb2
from dualpath.runtimes.process.serving import payload
from dualpath.runtimes.process.serving.peers import Ctx, UnknownPeerError
from dualpath.runtimes.process.serving.persists import retryable
from dualpath.runtimes.process.serving.storage import charge
from dualpath.runtimes.process.serving.wire import range_from_wire, range_to_wire

if TYPE_CHECKING:
    from dualpath.runtimes.process.serving.node import NodeShell

log = logging.getLogger(__name__)
DEADLINE_MARGIN_S = 0.05  # a downstream call must end before its caller's deadline does


class _AbandonedError(Exception):
    """The scheduler abandoned the attempt this read belongs to."""


class NodeIo:
    def __init__(self, shell: NodeShell) -> None:
        self.shell = shell

    @property
    def ctx(self) -> EngineContext:
        return self.shell.ctx

    async def read_kv(self, request: node_pb2.ReadKvRequest, context: Ctx) -> node_pb2.ReadKvReply:
        """Reserve the buffer, then read the hit into it and verify it (`read_storage`;
        with the DRAM tier on, `TierIo.read`)."""
        await self._working(context)
        rng = range_from_wire(request.range, self.ctx.chains)
        tier_io = self.shell.tier_io
        # The DRAM tier (tier_io.py): what the tiers hold of the plan is claimed when the
        # read arrives, while the buffer is awaited (HiCache locks what a request matched).
        claim = tier_io.claim(request, rng) if tier_io is not None and rng.nblocks else None
        try:
            await self._reserve(request)
            if claim is None or tier_io is None:
                bad = None
                if rng.nblocks:
                    bad = await self.read_storage(
                        rng, request.nbytes, request.target, request.vl, context
                    )
                return bad or node_pb2.ReadKvReply(blocks_verified=rng.nblocks)
            return await tier_io.read(request, rng, await claim, context)
        except _AbandonedError as exc:
            return node_pb2.ReadKvReply(error=str(exc), error_kind="cancelled")
        finally:
            if claim is not None:
                claim.cancel()  # (done already, unless the read did not get that far)

    async def _reserve(self, request: node_pb2.ReadKvRequest) -> None:
        """Reserve the read's buffer space (waits, FIFO) unless the turn was abandoned."""
        key = (int(request.request_id), int(request.attempt))
        res = self.shell.reservations
        if res.abandoned(key):
            raise _AbandonedError(f"turn {key[0]} was abandoned")
        if request.reserve_bytes > 0:
            # (a cancelled acquire gives the bytes back)
            await self.shell.node_hw.buffer.acquire(request.reserve_bytes)
            if not res.hold(key, request.reserve_bytes):
                raise _AbandonedError(f"turn {key[0]} was abandoned")

    async def read_storage(
        self, rng: BlockRange, nbytes: float, target: int, vl: int, context: Ctx
    ) -> node_pb2.ReadKvReply | None:
        """Read `rng` storage -> SNIC -> DRAM: the storage charges its target, this node
        its SNIC and DRAM, at once; the digest is checked here. None when it verified,
        else the reply that says why not."""
        ctx, node = self.ctx, self.shell.node_hw
        local = None
        if not ctx.policy.oracle:
            local = asyncio.ensure_future(
                charge(ctx.hw.fabric, [node.snic_rx, node.dram], nbytes, vl)
            )
        try:
            digest, got = await self._fetch(rng, nbytes, target, vl, context)
        except grpc.aio.AioRpcError as exc:
            if local is not None:
                local.cancel()
            kind = "missing" if exc.code() == grpc.StatusCode.NOT_FOUND else "unavailable"
            return node_pb2.ReadKvReply(error=str(exc.details()), error_kind=kind)
        if local is not None:
            await local
        self.shell.payload_bytes_verified += got
        want = payload.payload_size(nbytes, self.shell.opts.real_payload)
        if got != want:
            return node_pb2.ReadKvReply(
                error=f"{rng}: received {got} payload bytes, expected {want}",
                error_kind="corrupted",
            )
        expected = ctx.chains.expected_digest(rng)
        if digest != expected:
            return node_pb2.ReadKvReply(
                error=f"{rng}: stored digest {digest:#x} != chain digest {expected:#x}",
                error_kind="corrupted",
            )
        return None

    async def _working(self, context: Ctx) -> None:
        """A restarted node serves gRPC once it has registered, and learns its peers a
        moment later (host.py `_join`); the scheduler may already send it a read. The read
        waits for them within its deadline, else UNAVAILABLE: the scheduler places the turn
        elsewhere. (It used to trip an assertion, a bug that stops the node.)"""
        if self.shell.working.is_set():
            return
        remaining = context.time_remaining()
        timeout = self.shell.opts.transfer_deadline()
        if remaining is not None:
            timeout = max(0.0, min(timeout, remaining - DEADLINE_MARGIN_S))
        try:
            await asyncio.wait_for(self.shell.working.wait(), timeout)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"{self.shell.name} is starting: it has not seen every service of the run "
                f"register within {timeout:.2f} s; place the read elsewhere",
            )

    async def _fetch(
        self, rng: BlockRange, nbytes: float, target: int, vl: int, context: Ctx
    ) -> tuple[int, int]:
        assert self.shell.peers is not None  # _working waited for them
        pacer, scale = self.shell.pacer, self.shell.opts.real_payload
        if pacer is not None:  # the read's bytes come in over this node's SNIC
            size = payload.payload_size(nbytes, scale)
            await pacer.pace(self.shell.node_hw.snic_rx.name, vl, size)
        remaining = context.time_remaining()
        timeout = self.shell.opts.transfer_deadline()
        if remaining is not None:
            timeout = max(0.001, min(timeout, remaining - DEADLINE_MARGIN_S))
        msg = kv_pb2.ReadBlocksRequest(
            range=range_to_wire(rng, self.ctx.chains),
            target=target,
            nbytes=nbytes,
            vl=vl,
            payload_scale=self.shell.opts.real_payload,
        )
        digest, got = -1, 0
        async for chunk in self.shell.peers.storage().Read(msg, timeout=timeout):
            got += payload.verify(chunk.payload, "read")
            if chunk.last:
                digest = int(chunk.digest)
        return digest, got

    async def send_write(self, ranges: list[BlockRange], nbytes: float, timeout: float) -> None:
        """One Write of `ranges` to the storage; raises what the call raised."""
        ctx, shell = self.ctx, self.shell
        assert shell.peers is not None
        size = payload.payload_size(nbytes, shell.opts.real_payload)
        msg = kv_pb2.WriteBlocksRequest(
            ranges=[range_to_wire(r, ctx.chains) for r in ranges],
            digests=[ctx.chains.expected_digest(r) for r in ranges],
            nbytes=nbytes,
            vl=ctx.vl.kv_vl,
            payload=payload.make(ranges[0].session, size),
        )
        await shell.peers.storage().Write(msg, timeout=timeout)

    async def resend(self, ranges: list[BlockRange], timeout: float) -> None:
        """A kept write sent again (runtimes/process/serving/persists.py): its bytes cross the
        storage's
        write link again; this node's own hops are not charged twice (rare: a restart)."""
        nbytes = sum(r.nblocks for r in ranges) * self.ctx.full_block_bytes
        await self.send_write(ranges, nbytes, timeout)

    def gauges(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        # the engines' vllm:* metrics are whole families (runtimes/process/serving/vllm_engine.py)
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        buf = self.shell.node_hw.buffer
        out["dualpath_dram_buffer_used_bytes"] = [({"node": self.shell.name}, buf.used)]
        released = self.shell.reservations.released_bytes
        out["dualpath_dram_buffer_released_bytes"] = [({"node": self.shell.name}, released)]
        return out


class RemoteDecodeUnit(DecodeUnit):
    """A decode unit whose persists go to the storage process: its own CNIC, DRAM and SNIC
    are charged here, the store's write link there; the store checks the digests."""

    def __init__(
        self,
        ctx: EngineContext,
        engines: list[EngineState],
        on_done: RequestHook,
        io: NodeIo,
        on_progress: ProgressHook | None = None,
    ) -> None:
        super().__init__(ctx, engines, on_done, on_progress)
        self._io = io

    def ship(self, ranges: list[BlockRange], nbytes: float, de: EngineState) -> None:
        self._io.shell.spawn(self._write(ranges, nbytes, de))

    async def _write(self, ranges: list[BlockRange], nbytes: float, de: EngineState) -> None:
        ctx, shell = self.ctx, self._io.shell
        assert shell.peers is not None
        local = None
        if not ctx.policy.oracle:
            hops = [h for h in ctx.hw.persist_hops(de) if h is not ctx.hw.storage_write]
            local = asyncio.ensure_future(charge(ctx.hw.fabric, hops, nbytes, ctx.vl.kv_vl))
        if shell.pacer is not None:  # the persist leaves through this node's SNIC
            size = payload.payload_size(nbytes, shell.opts.real_payload)
            await shell.pacer.pace(ctx.hw.node_of(de).snic_tx.name, ctx.vl.kv_vl, size)
        # The store counts the blocks it adds (they become hits only once stored there) and
        # acknowledges a write once its index entry is durable. A write is idempotent (a
        # stored block is not added again), so one that gets no acknowledgement is kept and
        # sent again (runtimes/process/serving/persists.py): a storage restart costs no block.
        try:
            await self._io.send_write(ranges, nbytes, shell.opts.transfer_deadline())
        except (grpc.aio.AioRpcError, UnknownPeerError, ConnectionError, TimeoutError) as exc:
            if retryable(exc):
                shell.persists.keep(ranges)
            else:
                shell.persist_dropped(ranges[0], _code(exc))
        if local is not None:
            await local


def _code(exc: BaseException) -> str:
    return exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
