"""Split reads (policy `dualpath-split`, model/policies/split.py): one request's hit read through
both sides at once, the first `pe_part` tokens' blocks by the PE node's SNIC into its DRAM
buffer and the rest by the DE node's into the DE buffer. Virtual time only: the process
runtime reads on one node in one RPC and refuses the policy at start (model/engines/scheduler.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from dualpath.model.engines.capacity import Join
from dualpath.model.engines.context import EngineContext
from dualpath.model.entities.request import NodeState, ReadPath, Request


def whole_blocks(req: Request, hit_blocks: int, block_tokens: int) -> ReadPath:
    """Round a split's PE part to whole blocks (storage moves Full Blocks); a part that
    rounds to nothing makes the read a plain one on the other side."""
    bt = block_tokens
    pe_blocks = (req.pe_part + bt // 2) // bt
    req.pe_part = pe_blocks * bt if 0 < pe_blocks < hit_blocks else 0
    if req.pe_part:
        return ReadPath.SPLIT
    return ReadPath.DE if pe_blocks <= 0 else ReadPath.PE


def read_split(
    ctx: EngineContext,
    req: Request,
    hit_blocks: int,
    target: Callable[[Request, int], int],
    then: Callable[[], None],
) -> None:
    """Two concurrent flows, each side's read_q holding its part until that part is in;
    `then()` once both are. `target(req, end_block)`: the storage target serving the part
    that ends there."""
    pe, de = req.pe, req.de
    assert pe is not None and de is not None
    pe_blocks = req.pe_part // ctx.block_tokens
    parts = (
        (pe.node, req.pe_part, 0, pe_blocks),
        (de.node, req.hit - req.pe_part, pe_blocks, hit_blocks),
    )
    for node, tokens, _, _ in parts:  # queued while waiting for buffers (as a KvRead)
        node.read_q += tokens

    def start() -> None:
        req.t_read_start = ctx.timing.now()
        join = Join()
        for node, tokens, first, end in parts:
            hops = ctx.hw.storage_read_hops(node, target(req, end))
            on_done = functools.partial(_part_read, node, tokens, join.add())
            ctx.move((end - first) * ctx.full_block_bytes, hops, ctx.kv_vl, on_done)
        join.then(done)

    def done() -> None:
        req.t_read_done = ctx.timing.now()
        then()

    pe_buffer = ctx.hw.node_of(pe).buffer
    ctx.hw.node_of(de).buffer.acquire_then(
        req.buffer_bytes, lambda: pe_buffer.acquire_then(req.pe_part * ctx.kv_token, start)
    )


def _part_read(node: NodeState, tokens: int, done: Callable[[], None]) -> None:
    node.read_q -= tokens
    done()
