"""Decode engines (DESIGN §2): receive prompt KV into the DRAM buffer, copy it to HBM,
run batched decode steps, persist every completed block through the node's SNIC.

All running requests are in every step (DEs batch everything, paper §6.2). The GPUs of
one EP group step in lockstep, so a `DecodeUnit` owns one EP group (or one GPU for dense
models). Work per emulated step is O(engines), not O(requests): each engine keeps running
sums of its batch's contexts, a request's progress is derived from the unit's step
counter, and a chunk of steps runs as one event until the next thing that changes the
batch (a join, a completion) or a persist flush is due. A join cuts the current chunk at
the next step boundary, so coalescing never delays a token.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence

from dualpath.blocks import BlockRange
from dualpath.engines.context import EngineContext, RequestHook
from dualpath.engines.request import EngineState, Request
from dualpath.links import Link
from dualpath.policies.base import release_decode


class _Batch:
    """One DE's running requests and the sums a decode step's roofline needs."""

    __slots__ = ("a2a_pending", "att_sum", "ctx_sum", "engine", "growing", "reqs")

    def __init__(self, engine: EngineState) -> None:
        self.engine = engine
        self.reqs: dict[int, Request] = {}
        self.ctx_sum = 0  # Σ context over the batch at the unit's current step
        self.att_sum = 0  # Σ attended keys (DSA caps each at top-k)
        self.growing = 0  # requests whose attended keys still grow by one per step
        self.a2a_pending = 0.0  # all-to-all bytes of steps already run, not yet on the CNIC


class DecodeUnit:
    def __init__(
        self, ctx: EngineContext, engines: Sequence[EngineState], on_done: RequestHook
    ) -> None:
        self.ctx = ctx
        self.engines = list(engines)
        self.batches = {e.engine_id: _Batch(e) for e in engines}
        self.step = 0  # decode steps this unit has completed
        self._finish: list[tuple[int, int, Request]] = []  # (last step, rid, request)
        self._joining: list[Request] = []
        self._fresh: list[Request] = []  # joined at the start of the current chunk
        self._next_flush = ctx.engine.decode_chunk_steps
        self._wake: asyncio.Future[None] | None = None
        self._on_done = on_done
        self._topk = ctx.roofline.attended(1 << 40)

    # --- arrival of a prefilled request -------------------------------------------------
    def receive(self, req: Request) -> None:
        """Prompt KV is in the DE buffer: H2D through the DE's CNIC, then join the batch."""
        de = req.de
        assert de is not None
        ctx = self.ctx
        hops = ctx.hw.h2d_hops(de)
        ctx.move(req.prompt * ctx.kv_token, hops, ctx.vl.kv_vl, lambda: self._arrived(req))

    def _arrived(self, req: Request) -> None:
        de = req.de
        assert de is not None
        self.ctx.hw.node_of(de).buffer.release(req.buffer_bytes)
        req.buffer_bytes = 0.0
        req.generated = 1  # the first token came from the PE
        self._persist([req], de)  # prompt blocks the prefill computed
        if req.gen <= 1:
            req.t_second = req.t_last = req.t_first
            self._complete(req)
            return
        self._joining.append(req)
        self._wake_up()

    # --- the step loop ------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._admit()
            if not self._finish:
                self._wake = loop.create_future()
                await self._wake
                continue
            await self._chunk(loop)

    def _admit(self) -> None:
        for req in self._joining:
            assert req.de is not None
            b = self.batches[req.de.engine_id]
            b.reqs[req.rid] = req
            req.join_step = self.step
            b.ctx_sum += req.prompt
            req.att_join = self.ctx.roofline.attended(req.prompt)
            b.att_sum += req.att_join
            b.growing += req.att_join == req.prompt
            heapq.heappush(self._finish, (self.step + req.gen - 1, req.rid, req))
        self._fresh = self._joining
        self._joining = []

    async def _chunk(self, loop: asyncio.AbstractEventLoop) -> None:
        ctx = self.ctx
        k = min(ctx.engine.decode_chunk_steps, self._finish[0][0] - self.step)
        k = max(1, min(k, self._next_flush - self.step))
        step, per_engine = self._step_time(k)
        t0 = ctx.clock.now()
        self._wake = loop.create_future()
        timer = ctx.clock.call_at(t0 + k * step, self._wake_up)
        await self._wake
        steps = k
        if ctx.clock.now() < t0 + k * step - 1e-12:  # a request joined: cut the chunk
            timer.cancel()
            steps = min(k, int((ctx.clock.now() - t0) / step) + 1)
            await ctx.clock.sleep_until(t0 + steps * step)
        ctx.metrics.decode_chunks += 1
        for eid, t, a2a_bytes in per_engine:
            ctx.metrics.add_busy(eid, t * steps)
            self.batches[eid].a2a_pending += a2a_bytes * steps
        self._advance(t0, step, steps)

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _step_time(self, k: int) -> tuple[float, list[tuple[str, float, float]]]:
        """Lockstep: the slowest GPU sets the step (its compute, or its all-to-all)."""
        ctx = self.ctx
        rl = ctx.roofline
        mid = (k - 1) // 2
        longest = 0.0
        per_engine: list[tuple[str, float, float]] = []
        for b in self.batches.values():
            n = len(b.reqs)
            if not n:
                continue
            t = rl.decode_step_time(n, b.ctx_sum + n * mid, b.att_sum + b.growing * mid)
            nbytes = ctx.a2a_bytes(n, rl.layers)
            if nbytes > 0:
                gpu = ctx.hw.gpu_of(b.engine)
                rate = min(self._model_rate(gpu.cnic_tx), self._model_rate(gpu.cnic_rx))
                t = max(t, nbytes / rate)
            per_engine.append((b.engine.engine_id, t, nbytes))
            longest = max(longest, t)
        return longest, per_engine

    def _model_rate(self, link: Link) -> float:
        """Rate a decode step's all-to-all gets on a CNIC given the flows on it now (one
        step's traffic is too small and too frequent to time as its own flow)."""
        vl = self.ctx.vl
        kv = link.active_flows
        if not kv:
            return link.rate
        if vl.isolation:
            hl = vl.high_limit * 4096
            return link.rate * hl / (hl + vl.mtu_bytes)
        return link.rate / (1 + kv)

    def _advance(self, t0: float, step: float, steps: int) -> None:
        for req in self._fresh:
            req.t_second = t0 + step
        self._fresh = []
        self.step += steps
        for b in self.batches.values():
            n = len(b.reqs)
            b.ctx_sum += n * steps
            b.att_sum += b.growing * steps
        while self._finish and self._finish[0][0] <= self.step:
            last, _, req = heapq.heappop(self._finish)
            req.t_last = t0 + (last - (self.step - steps)) * step
            req.generated = req.gen
            self._leave(req)
            self._complete(req)
        if self.step >= self._next_flush:
            self._next_flush = self.step + self.ctx.engine.decode_chunk_steps
            for b in self.batches.values():
                self._persist(list(b.reqs.values()), b.engine)
                self._flush_a2a(b)

    def _flush_a2a(self, b: _Batch) -> None:
        """Put the all-to-all of the steps just run on the CNIC's high-priority VL.

        Step times already include it (analytically, from the VL share the CNIC gives it);
        one flow per flush interval instead of per step keeps events affordable while the
        links still carry, and KV transfers still compete with, the model traffic.
        """
        if b.a2a_pending <= 0:
            return
        ctx = self.ctx
        gpu = ctx.hw.gpu_of(b.engine)
        ctx.hw.fabric.start(b.a2a_pending, [gpu.cnic_tx, gpu.cnic_rx], ctx.vl.model_vl)
        b.a2a_pending = 0.0

    def _leave(self, req: Request) -> None:
        assert req.de is not None
        b = self.batches[req.de.engine_id]
        del b.reqs[req.rid]
        ctx_now = req.prompt + req.gen - 1
        b.ctx_sum -= ctx_now
        if req.att_join == req.prompt:  # its attended keys grew with every step
            b.att_sum -= ctx_now
            b.growing -= 1
        else:
            b.att_sum -= req.att_join
        self._persist([req], req.de)

    # --- persistence and completion ---------------------------------------------------
    def _generated(self, req: Request) -> int:
        if req.rid in self._batch_of(req).reqs:
            return min(req.gen, 1 + self.step - req.join_step)
        return req.generated

    def _batch_of(self, req: Request) -> _Batch:
        assert req.de is not None
        return self.batches[req.de.engine_id]

    def _persist(self, reqs: list[Request], de: EngineState) -> None:
        """Persist every block that has filled since the last call, as one transfer."""
        ctx = self.ctx
        bt = ctx.engine.block_tokens
        ranges: list[BlockRange] = []
        for r in reqs:
            full = (r.prompt + self._generated(r) - 1) // bt  # the newest token has no KV yet
            if full > r.persisted_blocks:
                ranges.append(BlockRange(r.session, r.persisted_blocks, full))
                r.persisted_blocks = full
        if not ranges:
            return
        nbytes = sum(rng.nblocks for rng in ranges) * ctx.full_block_bytes
        self._ship(ranges, nbytes, de)

    def _ship(self, ranges: list[BlockRange], nbytes: float, de: EngineState) -> None:
        """Move the filled blocks to the store (the process runtime ships them over gRPC)."""
        ctx = self.ctx
        ctx.move(nbytes, ctx.hw.persist_hops(de), ctx.vl.kv_vl, lambda: self._persisted(ranges))

    def _persisted(self, ranges: list[BlockRange]) -> None:
        ctx = self.ctx
        for rng in ranges:
            added = ctx.store.persist_any_order(rng, ctx.chains.expected_digest(rng))
            ctx.metrics.integrity.blocks_persisted += added
            ctx.metrics.integrity.bytes_persisted += added * ctx.full_block_bytes
            if added and ctx.faults.corrupt_left > 0:
                ctx.faults.corrupt_left -= 1
                ctx.store.corrupt(rng.session, rng.stop - 1)

    def _complete(self, req: Request) -> None:
        release_decode(req)
        self.ctx.metrics.finish(req)
        req.done.set_result(None)
        self._on_done(req)
