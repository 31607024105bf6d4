"""A KV read with the host-DRAM tier on, in a node process (docs/tier.md): the process
runtime's side of `model/engines/tier_read.py`.

The scheduler planned the hit [0, h) on its directory: [0, a) from this node's tier,
[a, b) from node `tier_src`'s tier, [b, h) from storage. Here: [0, a) moves nothing (the
prefill's H2D load reads it in DRAM, as it reads the buffer); [a, b) is asked of the source
node (`TierRead`: what it holds and that copy's digest), then moved over
`Hardware.tier_remote_hops` (its DRAM and CNIC tx charged there, by `Charge`; this node's
CNIC rx and DRAM here); [b, h) is read from storage as without the tier, concurrently with
the remote part. Every part is verified against the chain's digest. A planned tier block
this node or the source no longer holds (evicted since, or the source is gone: a killed
node's tier is only a cache) is read from storage instead and counted as such.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from dualpath.model.blocks import BlockRange, ChainRegistry
from dualpath.rpc.v1 import node_pb2
from dualpath.runtimes.process.serving.node_tier import HeldTier
from dualpath.runtimes.process.serving.peers import Ctx, UnknownPeerError
from dualpath.runtimes.process.serving.wire import range_from_wire, range_to_wire

if TYPE_CHECKING:
    from dualpath.runtimes.process.serving.node_io import NodeIo

Bad = node_pb2.ReadKvReply | None


@dataclass(frozen=True, slots=True)
class Claim:
    """What the tiers held of a read's plan when it arrived: its plan [0, a) local, [a, b)
    on the source; `local` and `remote` blocks of those held (checked: `bad` if a copy
    did not match its chain). Taken when the read arrives, before its buffer is granted,
    as HiCache locks the radix nodes a request matched; the rest is read from storage."""

    a: int
    b: int
    local: int
    remote: int
    bad: Bad


class TierIo:
    def __init__(self, io: NodeIo, tier: HeldTier) -> None:
        self.io = io
        self.tier = tier

    def claim(self, request: node_pb2.ReadKvRequest, rng: BlockRange) -> asyncio.Task[Claim]:
        """Start claiming what the tiers hold of the plan (see `Claim`)."""
        return asyncio.ensure_future(self._claim(request, rng))

    async def _claim(self, request: node_pb2.ReadKvRequest, rng: BlockRange) -> Claim:
        s, hit = rng.session, rng.stop
        a = min(int(request.tier_local), hit)
        b = min(max(int(request.tier_end), a), hit)
        local, digest = self.tier.take(s, 0, a)
        bad = self._check(BlockRange(s, 0, local), digest, "DRAM tier")
        remote, bad_remote = await self._ask(request.tier_src, BlockRange(s, a, b))
        return Claim(a, b, local, remote, bad or bad_remote)

    async def read(
        self, request: node_pb2.ReadKvRequest, rng: BlockRange, got: Claim, context: Ctx
    ) -> node_pb2.ReadKvReply:
        if got.bad is not None:
            return got.bad
        s, hit, vl, a, b = rng.session, rng.stop, request.vl, got.a, got.b
        # every part at once: the remote blocks held, the planned storage part, and what
        # the two tiers no longer hold of the plan (from storage)
        bads = await asyncio.gather(
            self._move(request.tier_src, s, got.remote, vl),
            self._storage(BlockRange(s, b, hit), request.nbytes, request.target, vl, context),
            self._shortfall(BlockRange(s, got.local, a), vl, context),
            self._shortfall(BlockRange(s, a + got.remote, b), vl, context),
        )
        bad = next((x for x in bads if x is not None), None)
        if bad is not None:
            return bad
        self.tier.served_local += got.local
        self.tier.fill(s, 0, hit)  # the whole hit is in this node's DRAM now (read-allocate)
        return node_pb2.ReadKvReply(
            blocks_verified=hit,
            tier_local=got.local,
            tier_remote=got.remote,
            storage_blocks=hit - got.local - got.remote,
        )

    def _check(self, part: BlockRange, digest: int, where: str) -> Bad:
        if part.nblocks == 0:
            return None
        expected = self.io.ctx.chains.expected_digest(part)
        if digest == expected:
            return None
        return node_pb2.ReadKvReply(
            error=f"{part}: {where} digest {digest:#x} != chain digest {expected:#x}",
            error_kind="corrupted",
        )

    async def _storage(
        self, part: BlockRange, nbytes: float, target: int, vl: int, context: Ctx
    ) -> Bad:
        if part.nblocks == 0:
            return None
        if target < 0:  # a part the scheduler did not plan: its target, as it would pick
            n = len(self.io.ctx.hw.targets)
            target = self.io.ctx.chains.target_of(part.session, part.stop - 1, n) if n else 0
        return await self.io.read_storage(part, nbytes, target, vl, context)

    async def _shortfall(self, part: BlockRange, vl: int, context: Ctx) -> Bad:
        """Planned from a tier that no longer holds it (evicted since, a lost node): read
        from storage, counted there and in `shortfall`."""
        if part.nblocks == 0:
            return None
        self.tier.shortfall += part.nblocks
        nbytes = part.nblocks * self.io.ctx.full_block_bytes
        return await self._storage(part, nbytes, -1, vl, context)

    async def _ask(self, src: str, part: BlockRange) -> tuple[int, Bad]:
        """`TierRead` on `src`: how many leading blocks of `part` it holds, checked."""
        shell, ctx = self.io.shell, self.io.ctx
        if not src or part.nblocks == 0:
            return 0, None
        assert shell.peers is not None
        msg = node_pb2.TierReadRequest(range=range_to_wire(part, ctx.chains))
        try:
            reply = await shell.peers.node(src).TierRead(msg, timeout=shell.opts.rpc_timeout_s)
        except (grpc.aio.AioRpcError, UnknownPeerError, ConnectionError, TimeoutError):
            return 0, None  # the source is gone or hung: its part comes from storage
        n = min(int(reply.blocks), part.nblocks)
        held = BlockRange(part.session, part.start, part.start + n)
        return n, self._check(held, int(reply.digest), f"{src}'s DRAM tier")

    async def _move(self, src: str, session: int, n: int, vl: int) -> Bad:
        """n blocks from `src`'s DRAM into this node's (`Hardware.tier_remote_hops`)."""
        shell, ctx = self.io.shell, self.io.ctx
        if n == 0 or ctx.policy.oracle:
            return None
        hops = ctx.hw.tier_remote_hops(ctx.hw.nodes[src].state, shell.node_hw.state, session)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def moved() -> None:
            if not done.done():
                done.set_result(None)

        shell.mover.start(n * ctx.full_block_bytes, hops, vl, moved)
        await done
        return None


async def serve_tier_read(
    tier: HeldTier | None, chains: ChainRegistry, request: node_pb2.TierReadRequest, context: Ctx
) -> node_pb2.TierReadReply:
    """`TierRead` on the source node: what its tier holds of the range (none without one)."""
    if tier is None:
        return node_pb2.TierReadReply()
    try:
        rng = range_from_wire(request.range, chains)
    except ValueError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    n, digest = tier.take(rng.session, rng.start, rng.stop)
    tier.served_remote += n
    return node_pb2.TierReadReply(blocks=n, digest=digest)
