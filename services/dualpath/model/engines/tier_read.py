"""A KV read with the host-DRAM tier on (docs/tier.md): the hit's leading blocks the
reading node holds in DRAM move nothing (the H2D load reads them there, as it reads the
buffer); blocks another node holds come over RDMA through both nodes' compute NICs; only
the rest crosses the storage NIC. The process runtime plans and accounts with the same
functions; its nodes move the parts (runtimes/process/serving/tier_io.py).

The hit itself is unchanged: the stored prefix, as without the tier (write-through: every
block in a tier was also persisted), so the tier changes where bytes come from, never which.
"""

from __future__ import annotations

from collections.abc import Callable

from dualpath.model.engines.capacity import Join
from dualpath.model.engines.context import EngineContext
from dualpath.model.entities.request import NodeState, ReadPath, Request


def plan_tier(ctx: EngineContext, req: Request, node: NodeState, hit_blocks: int) -> float:
    """Look the hit up in the tiers; returns the bytes still to read from storage."""
    tier = ctx.tier
    if tier is None or hit_blocks == 0 or req.path is ReadPath.SPLIT:
        return float(hit_blocks * ctx.full_block_bytes)
    plan = tier.lookup(req.session, node.name, hit_blocks)
    req.tier_local, req.tier_end, req.tier_src = plan.local, plan.end, plan.src
    return float((hit_blocks - plan.end) * ctx.full_block_bytes)


def storage_tokens(req: Request, block_tokens: int) -> int:
    """Hit tokens this read takes from storage: what its node's read queue counts."""
    return req.hit - req.tier_end * block_tokens


def read_tiered(
    ctx: EngineContext,
    req: Request,
    node: NodeState,
    hit_blocks: int,
    target: Callable[[Request, int], int],
    then: Callable[[], None],
) -> None:
    """The storage part and the remote-DRAM part, concurrently; `then()` once both are in.
    `target(req, end_block)`: the storage target serving the part that ends there."""
    join = Join()
    fbb = ctx.full_block_bytes
    if hit_blocks > req.tier_end:
        hops = ctx.hw.storage_read_hops(node, target(req, hit_blocks))
        ctx.move((hit_blocks - req.tier_end) * fbb, hops, ctx.kv_vl, join.add())
    if req.tier_src:
        src = ctx.hw.nodes[req.tier_src].state
        hops = ctx.hw.tier_remote_hops(src, node, req.session)
        ctx.move((req.tier_end - req.tier_local) * fbb, hops, ctx.kv_vl, join.add())
    join.then(then)


def after_read(ctx: EngineContext, req: Request, node: NodeState, hit_blocks: int) -> None:
    """The whole hit is now in `node`'s DRAM: its tier keeps it (read-allocate, as HiCache
    keeps what it prefetched from L3 in L2); count where each hit token came from."""
    tier, stats = ctx.tier, ctx.metrics.tier
    if tier is None or stats is None or hit_blocks == 0 or req.path is ReadPath.SPLIT:
        return
    tier.fill(node.name, req.session, 0, hit_blocks)
    bt, fbb = ctx.block_tokens, ctx.full_block_bytes
    parts = (
        ("local_dram", req.tier_local),
        ("remote_dram", req.tier_end - req.tier_local),
        ("storage", hit_blocks - req.tier_end),
    )
    for level, blocks in parts:
        stats.add(level, blocks * bt, float(blocks * fbb))
