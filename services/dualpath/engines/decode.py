"""Decode engines (DESIGN §2): receive prompt KV into the DRAM buffer, copy it to HBM,
run batched decode steps, persist every completed block through the node's SNIC.

All running requests are in every step (DEs batch everything, paper §6.2). The GPUs of
one EP group step in lockstep, so a `DecodeUnit` owns one EP group (or one GPU for dense
models). While the batch is stable, up to `decode_chunk_steps` steps are emulated as one
event; a request that joins mid-chunk cuts the chunk at the next step boundary, so
coalescing never delays a token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dualpath.blocks import BlockRange
from dualpath.engines.context import EngineContext, RequestHook
from dualpath.engines.request import EngineState, Request
from dualpath.links import Flow


class DecodeUnit:
    def __init__(
        self, ctx: EngineContext, engines: Sequence[EngineState], on_done: RequestHook
    ) -> None:
        self.ctx = ctx
        self.engines = list(engines)
        self.running: dict[str, list[Request]] = {e.engine_id: [] for e in engines}
        self._joining: list[Request] = []
        self._on_done = on_done
        self._wake: asyncio.Future[None] | None = None

    # --- arrival of a prefilled request -------------------------------------------------
    def receive(self, req: Request) -> None:
        """Prompt KV is in the DE buffer: H2D through the DE's CNIC, then join the batch."""
        de = req.de
        assert de is not None
        ctx = self.ctx
        ctx.move(req.prompt * ctx.kv_token, ctx.hw.h2d_hops(de), ctx.vl.kv_vl, lambda: self._join(req))

    def _join(self, req: Request) -> None:
        de = req.de
        assert de is not None
        self.ctx.hw.node_of(de).buffer.release(req.buffer_bytes)
        req.buffer_bytes = 0.0
        req.generated = 1  # the first token came from the PE
        self._persist_ready(de, [req])
        if req.generated >= req.gen:
            req.t_last = req.t_first
            self._complete(req)
            return
        self._joining.append(req)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # --- the step loop ------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for req in self._joining:
                assert req.de is not None
                self.running[req.de.engine_id].append(req)
            self._joining.clear()
            if not any(self.running.values()):
                self._wake = loop.create_future()
                await self._wake
                continue
            await self._chunk(loop)

    async def _chunk(self, loop: asyncio.AbstractEventLoop) -> None:
        ctx = self.ctx
        k = ctx.engine.decode_chunk_steps
        for reqs in self.running.values():
            for r in reqs:
                k = min(k, r.gen - r.generated)
        step = self._step_time(k)
        a2a = self._start_a2a(k)
        t0 = ctx.clock.now()
        self._wake = loop.create_future()
        timer = ctx.clock.call_at(t0 + k * step, self._wake_up)
        await self._wake
        steps = k
        if ctx.clock.now() < t0 + k * step - 1e-12:  # a request joined: cut the chunk
            timer.cancel()
            steps = min(k, int((ctx.clock.now() - t0) / step) + 1)
            for flow in a2a:
                flow.cancel()
            await ctx.clock.sleep_until(t0 + steps * step)
        ctx.metrics.decode_chunks += 1
        for e in self.engines:
            if self.running[e.engine_id]:
                ctx.metrics.add_busy(e.engine_id, steps * step)
        self._advance(t0, step, steps)

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _step_time(self, k: int) -> float:
        """Lockstep: the slowest GPU sets the step; contexts taken at mid-chunk."""
        rl = self.ctx.roofline
        longest = 0.0
        for reqs in self.running.values():
            if not reqs:
                continue
            n = len(reqs)
            mid = (k - 1) / 2
            ctx_sum = sum(r.prompt + r.generated for r in reqs) + int(n * mid)
            att = sum(rl.attended(r.prompt + r.generated + int(mid)) for r in reqs)
            longest = max(longest, rl.decode_step_time(n, ctx_sum, att))
        return longest

    def _start_a2a(self, k: int) -> list[Flow]:
        ctx = self.ctx
        flows: list[Flow] = []
        for e in self.engines:
            n = len(self.running[e.engine_id])
            nbytes = ctx.roofline.a2a_bytes_per_decode_step(n) * k if n else 0.0
            if nbytes > 0:
                gpu = ctx.hw.gpu_of(e)
                flows.append(ctx.hw.fabric.start(nbytes, [gpu.cnic_tx], ctx.vl.model_vl))
                flows.append(ctx.hw.fabric.start(nbytes, [gpu.cnic_rx], ctx.vl.model_vl))
        return flows

    def _advance(self, t0: float, step: float, steps: int) -> None:
        for e in self.engines:
            reqs = self.running[e.engine_id]
            if not reqs:
                continue
            finished: list[Request] = []
            for r in reqs:
                before = r.generated
                r.generated += steps
                if before < 2 <= r.generated:
                    r.t_second = t0 + (2 - before) * step
                if r.generated >= r.gen:
                    r.t_last = t0 + (r.gen - before) * step
                    finished.append(r)
            self._persist_ready(e, reqs)
            if finished:
                self.running[e.engine_id] = [r for r in reqs if r.generated < r.gen]
                for r in finished:
                    self._complete(r)

    # --- persistence and completion ---------------------------------------------------
    def _persist_ready(self, de: EngineState, reqs: list[Request]) -> None:
        """Persist every block that has filled since the last call, as one transfer."""
        ctx = self.ctx
        bt = ctx.engine.block_tokens
        ranges: list[BlockRange] = []
        for r in reqs:
            full = (r.prompt + r.generated - 1) // bt  # KV exists for all but the newest token
            if full > r.persisted_blocks:
                ranges.append(BlockRange(r.session, r.persisted_blocks, full))
                r.persisted_blocks = full
        if not ranges:
            return
        nbytes = sum(rng.nblocks for rng in ranges) * ctx.full_block_bytes
        ctx.move(nbytes, ctx.hw.persist_hops(de), ctx.vl.kv_vl, lambda: self._persisted(ranges))

    def _persisted(self, ranges: list[BlockRange]) -> None:
        ctx = self.ctx
        for rng in ranges:
            added = ctx.store.persist(rng, ctx.chains.expected_digest(rng))
            ctx.metrics.integrity.blocks_persisted += added
            ctx.metrics.integrity.bytes_persisted += added * ctx.full_block_bytes
            if added and ctx.faults.corrupt_left > 0:
                ctx.faults.corrupt_left -= 1
                ctx.store.corrupt(rng.session, rng.stop - 1)

    def _complete(self, req: Request) -> None:
        de = req.de
        assert de is not None
        de.free_hbm += req.hbm_bytes
        de.tok -= req.length
        de.seq -= 1
        self.ctx.metrics.finish(req)
        req.done.set_result(None)
        self._on_done(req)

