"""The core's `GlobalScheduler` with its request path over gRPC.

Placement (queues, group fetches, the policy's PE/DE/read-path choices, seq_e/tok_e/read_q
and free HBM) is the core's code, unchanged. What differs is how a placed request moves:
the KV read becomes `ReadKv` calls on the reading node (and a buffer reservation on the
DE), and the engines' completions come back as batched reports.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from dualpath.blocks import BlockRange
from dualpath.core.clock import Clock, TimerHandle
from dualpath.engines.context import EngineContext
from dualpath.engines.request import EngineState, ReadPath, Request
from dualpath.engines.scheduler import GlobalScheduler
from dualpath.policies.base import release_decode, release_prefill
from dualpath.rpc.v1 import kv_pb2, node_pb2, scheduler_pb2
from dualpath.serving import retry
from dualpath.serving.options import ServeOptions
from dualpath.serving.peers import Peers
from dualpath.serving.wire import lineage_to_wire, range_to_wire, request_to_wire


class Stages:
    """Mean emulated time of each stage of a turn: where the process runtime spends it."""

    NAMES = ("queued", "read_wait", "read", "prefill", "decode")

    def __init__(self) -> None:
        self.n = 0
        self.sums = dict.fromkeys(self.NAMES, 0.0)

    def add(self, r: Request) -> None:
        self.n += 1
        parts = (
            r.t_de - r.arrival,
            r.t_read_start - r.t_de,
            r.t_read_done - r.t_read_start,
            r.t_first - r.t_read_done,
            r.t_last - r.t_first,
        )
        for k, v in zip(self.NAMES, parts, strict=True):
            self.sums[k] += v

    def means(self) -> dict[str, float]:
        return {k: v / self.n for k, v in self.sums.items()} if self.n else {}


TokensHook = Callable[[int, float], None]  # (tokens generated so far, emulated time of the last)


class TokenPacer:
    """Hands a streamed turn's decode tokens to its front door at their emulated times.

    The DE announces each chunk's tokens when the chunk starts (`plan`); this releases
    token j when the clock reaches its step time, so the client sees the decode cadence
    (TTST, TPOT) rather than one burst per chunk. A later plan re-times the tokens not yet
    released (a join cut the chunk short). Token 1 is the PE's and is not paced here: it goes
    out when its report arrives, a report hop after its emulated time, so every later token
    is shifted by that same hop (`started`): the client's TTST and TPOT stay exact and only
    its TTFT carries the hop, which no stream can avoid.
    """

    def __init__(self, clock: Clock, emit: TokensHook) -> None:
        self._clock = clock
        self._emit = emit
        self._times: list[float] = [0.0]  # _times[j - 1]: emulated time of token j
        self.sent = 1  # tokens handed over (the first by the turn's first-token hook)
        self._shift = 0.0  # emulated seconds the first token was late: the others are too
        self._timer: TimerHandle | None = None

    def started(self, t_first: float) -> None:
        """The first token (emulated time `t_first`) is being sent now."""
        self._shift = max(0.0, self._clock.now() - t_first)
        self._arm()

    def plan(self, tokens: int, chunk_tokens: int, t_last: float, step_s: float) -> None:
        first = tokens - chunk_tokens + 1
        if first < 2 or tokens <= self.sent:
            return  # nothing new (a stale or malformed announcement)
        # a gap (a lost announcement) is filled with the chunk's first time: never late
        gap = [t_last - (chunk_tokens - 1) * step_s] * max(0, first - 1 - len(self._times))
        del self._times[first - 1 :]
        self._times += gap
        self._times += [t_last - (tokens - j) * step_s for j in range(first, tokens + 1)]
        self._arm()

    def finish(self, tokens: int, t_last: float) -> None:
        """The turn is done: every token exists, release the rest now."""
        self.cancel()
        if tokens > self.sent:
            self.sent = tokens
            self._emit(tokens, t_last)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        self.cancel()
        if self.sent < len(self._times):
            self._timer = self._clock.call_at(self._times[self.sent] + self._shift, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.now()
        n = self.sent
        while n < len(self._times) and self._times[n] + self._shift <= now + 1e-9:
            n += 1
        if n > self.sent:
            self.sent = n
            self._emit(n, self._times[n - 1])
        self._arm()


class KvReadFailedError(RuntimeError):
    """A node could not verify a request's KV (missing or corrupted block): fail loudly."""


# Failures of one request's remote work (see `RemoteScheduler.contain`).
CONTAINED = (grpc.aio.AioRpcError, TimeoutError, ConnectionError, KvReadFailedError)


class RemoteScheduler(GlobalScheduler):
    def __init__(
        self,
        ctx: EngineContext,
        pe_groups: list[list[EngineState]],
        de_groups: list[list[EngineState]],
        opts: ServeOptions,
    ) -> None:
        super().__init__(ctx, pe_groups, de_groups)
        self.opts = opts
        self.peers: Peers | None = None
        self.inflight: dict[int, Request] = {}
        self.first_token: dict[int, Callable[[], None]] = {}
        self.pacers: dict[int, TokenPacer] = {}  # streamed turns only
        self.stages = Stages()
        self.on_done: Callable[[Request], None] = lambda _req: None

    def submit(self, req: Request) -> None:
        super().submit(req)  # raises CapacityError before anything is queued
        self.inflight[req.rid] = req

    async def _read(self, req: Request) -> None:
        ctx, peers = self.ctx, self.peers
        pe, de = req.pe, req.de
        assert pe is not None and de is not None and peers is not None
        bt = ctx.engine.block_tokens
        msg = kv_pb2.LookupRequest(
            sessions=[req.session], lineage=lineage_to_wire(ctx.chains, req.session)
        )
        lookup = await retry.idempotent(
            lambda timeout: peers.storage().Lookup(msg, timeout=timeout), self.opts.rpc_timeout_s
        )
        hit_blocks = min(int(lookup.prefix_blocks[0]), (req.prompt - 1) // bt)
        req.hit = req.computed = hit_blocks * bt
        req.persisted_blocks = hit_blocks
        req.path = ctx.policy.choose_path(req, pe.node, de.node)
        req.buffer_bytes = req.prompt * ctx.kv_token
        reader = pe.node if req.path is ReadPath.PE else de.node
        nbytes = hit_blocks * ctx.full_block_bytes
        rng = BlockRange(req.session, 0, hit_blocks)
        reader.read_q += req.hit
        req.t_read_start = ctx.clock.now()
        try:
            if req.path is ReadPath.DE:
                reply = await self._read_kv(de.node.name, req, req.buffer_bytes, rng, nbytes)
            else:
                await self._read_kv(de.node.name, req, req.buffer_bytes, BlockRange(0, 0, 0), 0)
                reserve = req.hit * ctx.kv_token
                reply = await self._read_kv(pe.node.name, req, reserve, rng, nbytes)
        finally:
            reader.read_q -= req.hit
        req.t_read_done = ctx.clock.now()
        self._account_read(req, reply, hit_blocks, nbytes)
        await peers.node(pe.node.name).Enqueue(
            request_to_wire(req, ctx.chains), timeout=self.opts.rpc_timeout_s
        )

    async def _read_kv(
        self, node: str, req: Request, reserve: float, rng: BlockRange, nbytes: float
    ) -> node_pb2.ReadKvReply:
        assert self.peers is not None
        msg = node_pb2.ReadKvRequest(
            request_id=req.rid,
            reserve_bytes=reserve,
            range=range_to_wire(rng, self.ctx.chains),
            target=self._target(req, rng.stop) if rng.stop else 0,
            nbytes=nbytes,
            vl=self.ctx.vl.kv_vl,
        )
        return await self.peers.node(node).ReadKv(msg, timeout=self.opts.transfer_deadline())

    def _account_read(
        self, req: Request, reply: node_pb2.ReadKvReply, hit_blocks: int, nbytes: float
    ) -> None:
        integ = self.ctx.metrics.integrity
        self.ctx.metrics.record_path(req.path, nbytes)
        # The node that verified the read knows which block is missing or which digests
        # differ: its message says so (this process only has the error kind).
        if reply.error_kind == "missing":
            integ.blocks_lost += 1
            raise KvReadFailedError(f"request {req.rid}: missing KV: {reply.error}")
        if reply.error_kind == "corrupted":
            integ.blocks_corrupted += 1
            raise KvReadFailedError(f"request {req.rid}: corrupted KV: {reply.error}")
        if reply.error:
            raise KvReadFailedError(f"request {req.rid}: {reply.error}")
        integ.blocks_read += hit_blocks
        integ.bytes_from_storage += nbytes

    # --- reports from the nodes -----------------------------------------------------------
    def on_report(self, rep: scheduler_pb2.Report) -> None:
        req = self.inflight.get(rep.rid)
        if req is None:
            return  # a report for a turn this scheduler no longer tracks (restarted run)
        if rep.kind == scheduler_pb2.REPORT_KIND_PE_RELEASED:
            self._released(req, rep)
        elif rep.kind == scheduler_pb2.REPORT_KIND_PROGRESS:
            pacer = self.pacers.get(rep.rid)
            if pacer is not None:
                pacer.plan(rep.tokens, rep.chunk_tokens, rep.t_last, rep.step_s)
        elif rep.kind == scheduler_pb2.REPORT_KIND_DONE:
            self._done(req, rep)
        elif rep.kind == scheduler_pb2.REPORT_KIND_FAILED:
            self.fail_request(req, KvReadFailedError(rep.message or "request failed on a node"))

    # --- one request fails, the scheduler goes on -------------------------------------------
    def contain(self, req: Request, exc: BaseException) -> bool:
        """Across processes a request's work fails for reasons outside this process (a node
        died or is overloaded, a deadline passed, a block did not verify on a node): fail
        that request explicitly to its client and free what it held here; a bug (any other
        exception) still ends the run."""
        if not isinstance(exc, CONTAINED):
            return False
        self.fail_request(req, exc)
        return True

    def fail_request(self, req: Request, exc: BaseException) -> None:
        """Drop a turn: engine state back, client told, groups re-fetched. Idempotent."""
        if self.inflight.pop(req.rid, None) is None:
            return
        self.ctx.metrics.failed += 1
        hook = self.first_token.pop(req.rid, None)
        self.forget_pacer(req.rid)
        pe, de = req.pe, req.de
        if pe is not None and req.t_first < 0:  # the PE never reported its release
            release_prefill(req)
            self._kick("pe", [pe.group])
        if de is not None:
            release_decode(req)
            self._kick("de", [de.group])
        if hook is not None:
            hook()  # the admission queue forgets its prefill work
        if not req.done.done():
            req.done.set_exception(exc)

    def forget_pacer(self, rid: int) -> None:
        pacer = self.pacers.pop(rid, None)
        if pacer is not None:
            pacer.cancel()

    def _released(self, req: Request, rep: scheduler_pb2.Report) -> None:
        pe = req.pe
        assert pe is not None
        req.t_first = rep.t_first
        release_prefill(req)
        self._kick("pe", [pe.group])
        hook = self.first_token.pop(req.rid, None)
        if hook is not None:
            hook()

    def _done(self, req: Request, rep: scheduler_pb2.Report) -> None:
        de = req.de
        assert de is not None
        del self.inflight[req.rid]
        self.first_token.pop(req.rid, None)
        req.t_first, req.t_second, req.t_last = rep.t_first, rep.t_second, rep.t_last
        req.generated = req.gen
        pacer = self.pacers.pop(req.rid, None)
        if pacer is not None:  # before the turn returns: the stream's tokens come first
            pacer.finish(req.gen, req.t_last)
        release_decode(req)
        self.ctx.metrics.finish(req)
        self.stages.add(req)
        self.on_done(req)
        if not req.done.done():  # a fatal error already failed the turn's client
            req.done.set_result(None)
        self._kick("de", [de.group])
