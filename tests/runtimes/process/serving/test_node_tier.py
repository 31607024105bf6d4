"""runtimes/process/serving/node_tier.py: a node's own DRAM tier keeps the checksums of what
it holds and reports every change of a session's run; the scheduler's directory mirrors the
reports and never fills or evicts on its own; a node serves another node's read only what
it holds, with that copy's digest (docs/tier.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from dualpath.model.blocks import BlockRange, ChainRegistry
from dualpath.model.blocks.tier import DramTier, TierSet
from dualpath.model.core.clock import RealClock
from dualpath.rpc.v1 import node_pb2
from dualpath.runtimes.process.serving.node import NodeShell
from dualpath.runtimes.process.serving.node_tier import (
    HeldTier,
    MirrorTier,
    install,
    mirror,
    restore,
    snapshot,
)
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.wire import range_to_wire
from dualpath.runtimes.process.serving.world import build_world
from tests.runtimes.process.serving.conftest import scenario


def _held(capacity: int) -> tuple[HeldTier, list[tuple[int, int]]]:
    chains = ChainRegistry(salt=3)
    tiers = TierSet(["prefill0", "decode0"], capacity, "lru")
    held = install(tiers, "prefill0", chains)
    assert held is not None and tiers.tiers["prefill0"] is held  # units fill this object
    changes: list[tuple[int, int]] = []
    held.on_change = lambda s, n: changes.append((s, n))
    return held, changes


def test_a_held_tier_serves_what_it_holds_with_the_chains_digest() -> None:
    held, changes = _held(10)
    assert held.fill(1, 0, 6) == 6
    assert changes == [(1, 6)]
    n, digest = held.take(1, 2, 9)  # asks beyond what it holds: only [2, 6)
    assert n == 4 and digest == held.chains.expected_digest(BlockRange(1, 2, 6))
    assert held.take(1, 6, 9) == (0, 0)
    assert held.take(2, 0, 3) == (0, 0)  # a session it never held


def test_an_eviction_is_reported_and_the_victims_copy_shrinks() -> None:
    held, changes = _held(10)
    held.fill(1, 0, 6)
    held.fill(2, 0, 7)  # needs 3 blocks of session 1's tail
    assert held.cached(1) == 3 and held.cached(2) == 7
    assert sorted(changes[1:]) == [(1, 3), (2, 7)]
    n, digest = held.take(1, 0, 6)
    assert n == 3 and digest == held.chains.expected_digest(BlockRange(1, 0, 3))
    held.fill(1, 0, 5)  # grows again from the held run: the checksums follow
    n, digest = held.take(1, 0, 5)
    assert digest == held.chains.expected_digest(BlockRange(1, 0, n))


def test_the_directory_follows_reports_and_never_fills_or_evicts_itself() -> None:
    tiers = TierSet(["prefill0", "decode0"], 4, "lru")
    mirror(tiers)
    d = tiers.tiers["decode0"]
    assert isinstance(d, MirrorTier)
    assert tiers.fill("decode0", 1, 0, 3) == 0 and d.cached(1) == 0
    d.set_run(1, 3)
    d.set_run(2, 9)  # a node's report is the truth, whatever the directory would evict
    assert tiers.lookup(1, "prefill0", 5).src == "decode0"
    assert tiers.lookup(2, "prefill0", 5).end == 5
    d.set_run(1, 0)
    assert d.cached(1) == 0 and d.used == 9 and 1 not in d.runs
    d.clear()
    assert d.used == 0 and not d.runs


def test_a_snapshot_restores_the_report_side_copy() -> None:
    held, _ = _held(10)
    held.fill(1, 0, 6)
    held.fill(2, 0, 7)
    copy = DramTier("prefill0", 10)
    restore(copy, snapshot(held))
    assert copy.runs == held.runs and copy.used == held.used == 10
    assert (copy.evicted_blocks, copy.inserted_blocks) == (3, 13)


def test_a_node_serves_another_nodes_tier_read_only_from_its_tier() -> None:
    async def main() -> None:
        sc = scenario("tier.dram_bytes_per_node=1e9", "policy.name=hicache")
        opts = ServeOptions(role="decode", redis_url="redis://127.0.0.1:1/0", node=0)
        shell = NodeShell(opts, build_world(sc, RealClock(), "decode0"))
        try:
            assert shell.tier is not None and shell.ctx.tier is not None
            assert shell.ctx.tier.tiers["decode0"] is shell.tier  # the decode unit's fills
            chains = shell.ctx.chains
            ctx: Any = None
            shell.ctx.tier.fill("decode0", 5, 0, 8)  # as DecodeUnit._persist does
            msg = node_pb2.TierReadRequest(range=range_to_wire(BlockRange(5, 3, 12), chains))
            reply = await shell.TierRead(msg, ctx)
            assert reply.blocks == 5
            assert reply.digest == chains.expected_digest(BlockRange(5, 3, 8))
            assert shell.stats()["tier"]["served_remote"] == 5
        finally:
            await shell.stop()

    asyncio.run(main())


class _Source:
    """The source node's `TierRead`, as a stub peer: it holds [6, 8) of session 5."""

    def __init__(self, chains: ChainRegistry, corrupt: bool = False) -> None:
        self.chains, self.corrupt = chains, corrupt

    async def TierRead(self, msg: node_pb2.TierReadRequest, timeout: float) -> Any:  # noqa: N802
        digest = self.chains.expected_digest(BlockRange(5, 6, 8)) + int(self.corrupt)
        return node_pb2.TierReadReply(blocks=2, digest=digest & (2**64 - 1))


class _Peers:
    def __init__(self, source: _Source) -> None:
        self.source = source

    def node(self, name: str) -> _Source:
        assert name == "decode0"
        return self.source


def _tier_read(corrupt: bool) -> tuple[node_pb2.ReadKvReply, list[BlockRange], list[float], int]:
    """prefill0 reads blocks [0, 12) of session 5 planned as [0, 6) local (it holds only
    [0, 4)), [6, 10) on decode0 (which holds only [6, 8)), [10, 12) from storage."""
    out: dict[str, Any] = {}

    async def main() -> None:
        sc = scenario("tier.dram_bytes_per_node=1e9", "policy.name=hicache")
        opts = ServeOptions(role="prefill", redis_url="redis://127.0.0.1:1/0", node=0)
        shell = NodeShell(opts, build_world(sc, RealClock(), "prefill0"))
        try:
            assert shell.tier is not None and shell.tier_io is not None
            chains = shell.ctx.chains
            shell.tier.fill(5, 0, 4)
            stored: list[BlockRange] = []
            moved: list[float] = []

            async def read_storage(rng: BlockRange, *_args: Any) -> None:
                stored.append(rng)

            shell.io.read_storage = read_storage  # type: ignore[method-assign]
            shell.mover.start = lambda n, _hops, _vl, done: (moved.append(n), done())  # type: ignore[assignment, func-returns-value, method-assign]
            shell.peers = _Peers(_Source(chains, corrupt))  # type: ignore[assignment]
            fbb = shell.ctx.full_block_bytes
            msg = node_pb2.ReadKvRequest(
                range=range_to_wire(BlockRange(5, 0, 12), chains),
                nbytes=2 * fbb,
                tier_local=6,
                tier_end=10,
                tier_src="decode0",
            )
            rng = BlockRange(5, 0, 12)
            claim = await shell.tier_io.claim(msg, rng)
            out["reply"] = await shell.tier_io.read(msg, rng, claim, CTX)
            out["stored"], out["moved"], out["fbb"] = stored, moved, fbb
            out["short"] = shell.tier.shortfall
        finally:
            await shell.stop()

    asyncio.run(main())
    return out["reply"], out["stored"], [m / out["fbb"] for m in out["moved"]], out["short"]


CTX: Any = None


def test_planned_tier_blocks_no_tier_holds_are_read_from_storage_and_counted() -> None:
    reply, stored, moved, short = _tier_read(corrupt=False)
    assert reply.error == "" and reply.blocks_verified == 12
    assert (reply.tier_local, reply.tier_remote, reply.storage_blocks) == (4, 2, 6)
    # the planned storage part and what the two tiers no longer held
    want = [BlockRange(5, 4, 6), BlockRange(5, 8, 10), BlockRange(5, 10, 12)]
    assert sorted(stored, key=lambda r: r.start) == want
    assert moved == [2.0] and short == 4  # only the remote blocks held cross the CNICs


def test_a_source_copy_that_does_not_match_its_chain_fails_the_read() -> None:
    reply, _, moved, _ = _tier_read(corrupt=True)
    assert reply.error_kind == "corrupted" and "decode0's DRAM tier" in reply.error
    assert moved == []
