"""The core's `GlobalScheduler` with its request path over gRPC.

Placement (queues, group fetches, the policy's PE/DE/read-path choices, seq_e/tok_e/read_q
and free HBM) is the core's code, unchanged. What differs is how a placed request moves:
the KV read becomes `ReadKv` calls on the reading node (and a buffer reservation on the
DE), and the engines' completions come back as batched reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from dualpath.logs import event
from dualpath.model.blocks import BlockRange
from dualpath.model.engines.context import EngineContext
from dualpath.model.engines.tier_read import after_read, storage_tokens
from dualpath.model.entities.request import EngineState, ReadPath, Request
from dualpath.model.policies.base import release_decode, release_prefill
from dualpath.rpc.v1 import kv_pb2, node_pb2, scheduler_pb2
from dualpath.runtimes.process.serving import retry
from dualpath.runtimes.process.serving.forwards import RemoteForwards
from dualpath.runtimes.process.serving.node_tier import MirrorTier, mirror
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.pacer import TokenPacer
from dualpath.runtimes.process.serving.peers import UNREACHABLE, Peers
from dualpath.runtimes.process.serving.recovery import Recovery
from dualpath.runtimes.process.serving.stats import Stages
from dualpath.runtimes.process.serving.wire import lineage_to_wire, range_to_wire, request_to_wire


class KvReadFailedError(RuntimeError):
    """A node could not verify a request's KV (missing or corrupted block): fail loudly."""


class PeerUnreachableError(ConnectionError):
    """`node` did not answer (connection refused, deadline): suspect it until the registry
    shows it alive again, and place the turn elsewhere."""

    def __init__(self, node: str, exc: grpc.aio.AioRpcError) -> None:
        super().__init__(f"{node}: {exc.code().name} ({exc.details()})")
        self.node = node


# Failures of one request's remote work (see `RemoteScheduler.contain`).
CONTAINED = (grpc.aio.AioRpcError, TimeoutError, ConnectionError, KvReadFailedError)

log = logging.getLogger(__name__)


class RemoteScheduler(Recovery):
    # The DRAM tier (docs/tier.md): this scheduler keeps the directory of every node's tier
    # (lookups at placement, as on virtual time); the reading node serves its part.
    reads_tier = True
    # engine.fetch_mode=per-forward: the PE nodes report their units' forwards (forwards.py)
    reports_forwards = True

    def __init__(
        self,
        ctx: EngineContext,
        pe_groups: list[list[EngineState]],
        de_groups: list[list[EngineState]],
        opts: ServeOptions,
    ) -> None:
        # before the core's init, which hands `_pe_group_busy` to the fetches
        self.forwards = RemoteForwards(pe_groups, lockstep=ctx.roofline.moe_layers > 0)
        super().__init__(ctx, pe_groups, de_groups)
        mirror(ctx.tier)  # the nodes keep the tiers; this is their directory
        self.opts = opts
        self.peers: Peers | None = None
        self.inflight: dict[int, Request] = {}
        self.first_token: dict[int, Callable[[], None]] = {}
        self.pacers: dict[int, TokenPacer] = {}  # streamed turns only
        self.stages = Stages()
        self.on_done: Callable[[Request], None] = lambda _req: None
        self._reading: dict[int, asyncio.Task[None]] = {}  # rid -> its KV read, while it runs
        self.replaced = 0  # turns placed again after a node on their path was lost
        self.suspects: dict[str, float] = {}  # node -> emulated time a call to it failed
        self.lost_nodes: set[str] = set()  # declared lost by the registry (or restarted)

    def submit(self, req: Request) -> None:
        super().submit(req)  # raises CapacityError before anything is queued
        self.inflight[req.rid] = req

    def start_read(self, req: Request) -> None:
        """The core's seam: the read runs as this scheduler's task (`spawn`)."""
        self.spawn(self.read_kv(req), req)

    async def read_kv(self, req: Request) -> None:
        """The read over gRPC: the reading node reserves its buffer, reads and
        verifies (ReadKv), then the PE's node gets the turn (Enqueue)."""
        task = asyncio.current_task()
        assert task is not None
        self._reading[req.rid] = task
        try:
            await self._read_attempt(req)
        finally:
            if self._reading.get(req.rid) is task:
                del self._reading[req.rid]

    async def _read_attempt(self, req: Request) -> None:
        ctx, peers = self.ctx, self.peers
        pe, de = req.pe, req.de
        assert pe is not None and de is not None and peers is not None
        msg = kv_pb2.LookupRequest(
            sessions=[req.session], lineage=lineage_to_wire(ctx.chains, req.session)
        )
        lookup = await retry.idempotent(
            lambda timeout: peers.storage().Lookup(msg, timeout=timeout), self.opts.rpc_timeout_s
        )
        reader, hit_blocks, nbytes = self.plan_read(req, int(lookup.prefix_blocks[0]))
        event(
            log,
            "turn_placed",
            request_id=req.rid,
            pe=pe.node.name,
            de=de.node.name,
            path=req.path.value,
            hit_tokens=req.hit,
            attempt=req.attempt,
        )
        rng = BlockRange(req.session, 0, hit_blocks)
        # only the storage part (the whole hit without the tier), as on virtual time; an
        # abandoned attempt is reset while this still runs
        queued = storage_tokens(req, ctx.engine.block_tokens)
        reader.read_q += queued
        req.t_read_start = ctx.clock.now()
        try:
            if req.path is ReadPath.DE:
                reply = await self._read_kv(de.node.name, req, req.buffer_bytes, rng, nbytes)
            else:
                await self._read_kv(de.node.name, req, req.buffer_bytes, BlockRange(0, 0, 0), 0)
                reserve = req.hit * ctx.kv_token
                reply = await self._read_kv(pe.node.name, req, reserve, rng, nbytes)
        finally:
            reader.read_q -= queued
        req.t_read_done = ctx.clock.now()
        if ctx.tier is not None:  # what the node found where (its tier may have evicted)
            req.tier_local = int(reply.tier_local)
            req.tier_end = req.tier_local + int(reply.tier_remote)
            nbytes = float(reply.storage_blocks * ctx.full_block_bytes)
        self._account_read(req, reply, hit_blocks, nbytes)
        after_read(ctx, req, reader, hit_blocks)
        wire = request_to_wire(req, ctx.chains)
        await self._call(pe.node.name, peers.node(pe.node.name).Enqueue, wire)

    async def _read_kv(
        self, node: str, req: Request, reserve: float, rng: BlockRange, nbytes: float
    ) -> node_pb2.ReadKvReply:
        assert self.peers is not None
        msg = node_pb2.ReadKvRequest(
            request_id=req.rid,
            reserve_bytes=reserve,
            range=range_to_wire(rng, self.ctx.chains),
            target=self.storage_target(req, rng.stop) if rng.stop else 0,
            nbytes=nbytes,
            vl=self.ctx.vl.kv_vl,
            attempt=req.attempt,
        )
        if rng.stop:  # the tier's plan (docs/tier.md; all 0 with the tier off)
            msg.tier_local, msg.tier_end, msg.tier_src = req.tier_local, req.tier_end, req.tier_src
        reply: node_pb2.ReadKvReply = await self._call(node, self.peers.node(node).ReadKv, msg)
        return reply

    async def _call(self, node: str, method: Any, msg: Any) -> Any:
        """One RPC to a node; a node that does not answer becomes a PeerUnreachableError."""
        try:
            return await method(msg, timeout=self.opts.transfer_deadline())
        except grpc.aio.AioRpcError as exc:
            if exc.code() in UNREACHABLE:
                raise PeerUnreachableError(node, exc) from exc
            raise

    def _account_read(
        self, req: Request, reply: node_pb2.ReadKvReply, hit_blocks: int, nbytes: float
    ) -> None:
        # The node that verified the read knows which block is missing or which digests
        # differ: its message says so (this process only has the error kind).
        if reply.error_kind == "cancelled":
            raise asyncio.CancelledError  # the attempt was abandoned: nothing to report
        if reply.error_kind in ("missing", "corrupted"):
            self.account_read(req, hit_blocks, nbytes, reply.error_kind)
            raise KvReadFailedError(f"request {req.rid}: {reply.error_kind} KV: {reply.error}")
        if reply.error:
            raise KvReadFailedError(f"request {req.rid}: {reply.error}")
        self.account_read(req, hit_blocks, nbytes, "ok")

    # --- reports from the nodes -----------------------------------------------------------
    def on_report(self, rep: scheduler_pb2.Report) -> None:
        if rep.kind == scheduler_pb2.REPORT_KIND_TIER:
            self._tier_report(rep)
            return
        if rep.kind == scheduler_pb2.REPORT_KIND_FORWARD:
            self._forward_report(rep)
            return
        req = self.inflight.get(rep.rid)
        if req is None or rep.attempt != req.attempt:
            return  # a turn (or an attempt of one) this scheduler no longer tracks
        if rep.kind == scheduler_pb2.REPORT_KIND_PE_RELEASED:
            self._released(req, rep)
        elif rep.kind == scheduler_pb2.REPORT_KIND_PROGRESS:
            req.generated = max(req.generated, rep.tokens)  # the DE has it (recovery.py)
            pacer = self.pacers.get(rep.rid)
            if pacer is not None:
                pacer.plan(rep.tokens, rep.chunk_tokens, rep.t_last, rep.step_s)
        elif rep.kind == scheduler_pb2.REPORT_KIND_DONE:
            self._done(req, rep)
        elif rep.kind == scheduler_pb2.REPORT_KIND_FAILED:
            exc = KvReadFailedError(rep.message or "request failed on a node")
            if rep.unreachable in self.ctx.hw.nodes:  # a node's call to a peer went
                self.suspect(rep.unreachable)  # unanswered: as if it were this one's
            if not self._retry(req, exc):
                self.fail_request(req, exc)

    def _tier_report(self, rep: scheduler_pb2.Report) -> None:
        """A node's tier changed for one session: the directory follows (node_tier.py)."""
        tier = self.ctx.tier.tiers.get(rep.node) if self.ctx.tier is not None else None
        if isinstance(tier, MirrorTier) and rep.node not in self.lost_nodes:
            tier.set_run(int(rep.session), int(rep.tier_blocks))

    def _forward_report(self, rep: scheduler_pb2.Report) -> None:
        """A PE unit's forward began or ended (per-forward fetches): an end lets its group
        take what its kicks held, as `forward_ended` does on virtual time."""
        if rep.in_forward:
            self.forwards.began(rep.unit)
            return
        g = self.forwards.ended(rep.unit)
        if g is not None:
            self.fetches.forward_ended(g)

    def _pe_group_busy(self, g: int) -> bool:
        return self.forwards.busy(g, self.down.__contains__)

    def node_lost(self, name: str) -> None:
        """Also forget what its DRAM tier held: a restarted node's tier starts empty (a
        cache: every block in it was persisted too), and its forwards: a group it left
        "busy" fetches what its kicks held."""
        held = self.forwards.node_lost(name)
        super().node_lost(name)
        for g in held:
            self.fetches.forward_ended(g)
        tier = self.ctx.tier.tiers.get(name) if self.ctx.tier is not None else None
        if isinstance(tier, MirrorTier):
            tier.clear()

    # --- one request fails, the scheduler goes on -------------------------------------------
    def contain(self, req: Request, exc: BaseException) -> bool:
        """Across processes a request's work fails for reasons outside this process (a node
        died or is overloaded, a deadline passed, a block did not verify on a node): place
        it again if a node did not answer before it decoded, else fail that request
        explicitly to its client and free what it held; a bug (any other exception) still
        ends the run."""
        if not isinstance(exc, CONTAINED):
            return False
        if isinstance(exc, PeerUnreachableError):
            self.suspect(exc.node)
        if not (isinstance(exc, PeerUnreachableError) and self._retry(req, exc)):
            self.fail_request(req, exc)
        return True

    def fail_request(self, req: Request, exc: BaseException) -> None:
        """Drop a turn: engine state back, client told, groups re-fetched. Idempotent."""
        if self.inflight.pop(req.rid, None) is None:
            return
        self.ctx.metrics.failed += 1
        self.first_token.pop(req.rid, None)  # no first token for a failed turn
        self.forget_pacer(req.rid)
        self._abandon(req)
        if req.done is not None and not req.done.done():
            req.done.set_exception(exc)

    def cancel_queued(self, req: Request) -> bool:
        """The client left before the turn reached a DE: it leaves the queues, frees what it
        held, and its run_turn ends with CancelledError (nothing recorded)."""
        if req.de is not None or self.inflight.pop(req.rid, None) is None:
            return False
        self.first_token.pop(req.rid, None)
        self.forget_pacer(req.rid)
        self._abandon(req)
        if req.done is not None:
            req.done.cancel()
        return True

    def forget_pacer(self, rid: int) -> None:
        pacer = self.pacers.pop(rid, None)
        if pacer is not None:
            pacer.cancel()

    def _released(self, req: Request, rep: scheduler_pb2.Report) -> None:
        pe = req.pe
        assert pe is not None
        req.t_first = rep.t_first
        req.t_sched = rep.t_scheduled
        req.forward_s, req.load_wait_s = rep.forward_s, rep.load_wait_s
        release_prefill(req)
        self.fetches.kick("pe", [pe.group])
        hook = self.first_token.pop(req.rid, None)
        if hook is not None:
            hook()

    def _done(self, req: Request, rep: scheduler_pb2.Report) -> None:
        de = req.de
        assert de is not None
        del self.inflight[req.rid]
        self.first_token.pop(req.rid, None)
        req.t_first, req.t_second, req.t_last = rep.t_first, rep.t_second, rep.t_last
        req.t_handed, req.t_in_hbm, req.t_joined = rep.t_handed, rep.t_in_hbm, rep.t_joined
        req.generated = req.gen
        pacer = self.pacers.pop(req.rid, None)
        if pacer is not None:  # before the turn returns: the stream's tokens come first
            pacer.finish(req.gen, req.t_last)
        release_decode(req)
        self.ctx.metrics.finish(req)
        self.stages.add(req)
        self.on_done(req)
        # (a fatal error may already have failed the turn's client)
        if req.done is not None and not req.done.done():
            req.done.set_result(None)
        self.fetches.kick("de", [de.group])
