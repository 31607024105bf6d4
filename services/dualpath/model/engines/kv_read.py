"""A placed request's KV read on this process's fabric and store, as a state machine: each
step is a callback (buffer space granted, bytes moved), no coroutine per read. The global
scheduler starts it (`GlobalScheduler.start_read`, model/engines/scheduler.py); the process
runtime replaces that seam with RPCs to the reading node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dualpath.model.engines.split_read import read_split
from dualpath.model.engines.tier_read import after_read, read_tiered, storage_tokens
from dualpath.model.entities.request import NodeState, ReadPath, Request

if TYPE_CHECKING:
    from dualpath.model.engines.scheduler import GlobalScheduler


class KvRead:
    """One read: buffers, the storage (or tier) transfer, verification, then the PE's FIFO.

    The read is in its node's read queue from the moment its side is chosen, also while it
    waits for DRAM buffer space (as in the process runtime). Counted only once the buffer
    was granted, every read waiting for a full buffer was invisible to the next path
    choices, which all picked the other side: the reads herded onto one SNIC at a time
    (docs/scheduling.md, "read_q").
    """

    __slots__ = ("de_later", "hit_blocks", "nbytes", "node", "pe_read", "queued", "req", "sched")

    def __init__(self, sched: GlobalScheduler, req: Request) -> None:
        ctx = sched.ctx
        self.sched, self.req = sched, req
        self.node: NodeState
        self.node, self.hit_blocks, self.nbytes = sched.plan_read(
            req, ctx.store.prefix_blocks(req.session)
        )
        self.queued = storage_tokens(req, ctx.block_tokens)  # = hit without the tier
        self.pe_read = req.path is ReadPath.PE and req.hit > 0
        # A PE-path read lands in the PE buffer; its DE space is needed from prefill on.
        self.de_later = self.pe_read and ctx.de_buffer_after_pe_read

    def start(self) -> None:
        req, ctx = self.req, self.sched.ctx
        assert req.pe is not None and req.de is not None
        if req.path is ReadPath.SPLIT:
            read_split(ctx, req, self.hit_blocks, self.sched.storage_target, self._split_read)
            return
        self.node.read_q += self.queued
        if self.de_later:
            self._de_buffered()
        else:
            ctx.hw.node_of(req.de).buffer.acquire_then(req.buffer_bytes, self._de_buffered)

    def _de_buffered(self) -> None:
        req, ctx = self.req, self.sched.ctx
        assert req.pe is not None
        if self.pe_read:
            ctx.hw.node_of(req.pe).buffer.acquire_then(req.hit * ctx.kv_token, self._buffered)
        else:
            self._buffered()

    def _buffered(self) -> None:
        req, ctx = self.req, self.sched.ctx
        req.t_read_start = ctx.timing.now()
        if ctx.tier is not None:
            read_tiered(ctx, req, self.node, self.hit_blocks, self.sched.storage_target, self._read)
        elif self.nbytes > 0:
            hops = ctx.hw.storage_read_hops(
                self.node, self.sched.storage_target(req, self.hit_blocks)
            )
            ctx.move(self.nbytes, hops, ctx.kv_vl, self._read)
        else:
            self._read()

    def _read(self) -> None:
        req, ctx = self.req, self.sched.ctx
        self.node.read_q -= self.queued
        req.t_read_done = ctx.timing.now()
        self.sched.verify_read(req, self.hit_blocks, self.nbytes)
        after_read(ctx, req, self.node, self.hit_blocks)
        if self.de_later:  # counted in the TTFT breakdown's prefill_wait
            assert req.de is not None
            ctx.hw.node_of(req.de).buffer.acquire_then(req.buffer_bytes, self._enqueue)
        else:
            self._enqueue()

    def _split_read(self) -> None:
        self.sched.verify_read(self.req, self.hit_blocks, self.nbytes)
        self._enqueue()

    def _enqueue(self) -> None:
        req = self.req
        assert req.pe is not None
        self.sched.pe_unit[req.pe.engine_id].enqueue(req)
