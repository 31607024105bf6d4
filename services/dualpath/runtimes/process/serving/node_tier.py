"""The host-DRAM KV tier on the process runtime (docs/tier.md): each node's own tier, and
the scheduler's directory of them.

A node process keeps its tier: the pure `DramTier` (model/blocks/tier.py) of that node,
fed by what passes through its DRAM (a read's whole hit once verified; the decode's
persists, which `DecodeUnit._persist` fills into the same object), evicting on its own,
plus the checksums of the blocks it holds, so a hit served from DRAM, here or to another
node, is verified against its chain as a storage read is. Every change of a session's held
run (fill or eviction) is reported to the scheduler (`REPORT_KIND_TIER`), whose directory
(`MirrorTier`s in the same `TierSet`) is what the placement's lookups and the tier-aware
policies see. The directory lags a node by one report; a block it still lists that the
node has evicted is read from storage instead (`shortfall`), never served.

Write-through: every block in a tier is also persisted to storage, so a killed node's tier
is only a cache: it restarts empty, the scheduler drops it from the directory when the
node is lost, and its sessions' hits come from storage (or another node's tier).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dualpath.model.blocks import BlockRange, ChainRegistry
from dualpath.model.blocks.chain import U64
from dualpath.model.blocks.tier import DramTier, TierSet

MASK64 = (1 << 64) - 1


class HeldTier(DramTier):
    """This node's `DramTier`, plus the per-block checksums of the copy it holds."""

    def __init__(self, base: DramTier, chains: ChainRegistry) -> None:
        super().__init__(base.name, base.capacity, base.eviction)
        self.chains = chains
        self.journal = []  # sessions whose run changed, reported after each fill
        # (session, blocks now held): set by the node to report to the scheduler
        self.on_change: Callable[[int, int], None] = lambda _s, _n: None
        self.sums: dict[int, U64] = {}  # session -> checksums of blocks [0, n) as filled
        self.served_local = 0  # blocks served to this node's own reads
        self.served_remote = 0  # blocks served to other nodes' reads
        self.shortfall = 0  # blocks a read planned from a tier that were read from storage

    def fill(self, session: int, start: int, stop: int) -> int:
        """`DramTier.fill`, recording the checksums of the blocks it keeps: what arrived
        (a verified read, or the decode's own KV, whose digest it sends to storage too)."""
        have = self.cached(session)
        added = super().fill(session, start, stop)
        if added:
            old = self.sums.get(session)
            kept = old[:have] if old is not None else np.zeros(0, dtype=np.uint64)
            new = self.chains.expected_checksums(BlockRange(session, have, have + added))
            self.sums[session] = np.concatenate([kept, new])
            if len(self.sums) > 2 * len(self.runs) + 64:  # forget sessions evicted whole
                self.sums = {s: a for s, a in self.sums.items() if s in self.runs}
        if self.journal:
            changed, self.journal = dict.fromkeys(self.journal), []
            for s in changed:
                self.on_change(s, self.cached(s))
        return added

    def take(self, session: int, start: int, stop: int) -> tuple[int, int]:
        """Serve the leading blocks of [start, stop) this tier holds: (how many, the digest
        of the held copy of those). A match, as the directory's lookup counts it."""
        n = max(0, min(stop, self.cached(session)) - start)
        if n == 0:
            return 0, 0
        self.touch(session, hit=True)
        sums = self.sums[session][start : start + n]
        return n, int(sums.sum(dtype=np.uint64)) & MASK64


class MirrorTier(DramTier):
    """The scheduler's copy of one node's tier: the runs its reports say the node holds.
    It never fills or evicts on its own (the node does); lookups only read it."""

    def fill(self, session: int, start: int, stop: int) -> int:
        return 0  # the node fills its own tier and reports the result

    def touch(self, session: int, *, hit: bool = False) -> None:
        return None  # recency is the node's (its tier is touched when it serves)

    def set_run(self, session: int, blocks: int) -> None:
        self.used += blocks - self.runs.pop(session, 0)
        if blocks > 0:
            self.runs[session] = blocks

    def clear(self) -> None:
        self.runs.clear()
        self.used = 0


def mirror(tiers: TierSet | None) -> None:
    """Make `tiers` (the scheduler process's, which its policy shares) a directory."""
    if tiers is not None:
        for name, t in list(tiers.tiers.items()):
            tiers.tiers[name] = MirrorTier(name, t.capacity, t.eviction)


def install(tiers: TierSet | None, node: str, chains: ChainRegistry) -> HeldTier | None:
    """Replace `node`'s tier in this process's `TierSet` (the one its units fill) by a
    `HeldTier`; None with the tier off."""
    if tiers is None:
        return None
    held = HeldTier(tiers.tiers[node], chains)
    tiers.tiers[node] = held
    return held


def snapshot(t: DramTier) -> dict[str, Any]:
    """What the report needs of a node's tier (report/tier.py), as plain data."""
    return {
        "runs": t.runs,
        "used": t.used,
        "peak": t.peak,
        "inserted_blocks": t.inserted_blocks,
        "evicted_blocks": t.evicted_blocks,
        "evicted_sessions": t.evicted_sessions,
        "served_local": getattr(t, "served_local", 0),
        "served_remote": getattr(t, "served_remote", 0),
        "shortfall": getattr(t, "shortfall", 0),
    }


def restore(t: DramTier, snap: dict[str, Any]) -> None:
    """Load a node's snapshot into the report's idle copy of its tier."""
    t.runs = {int(s): int(n) for s, n in snap["runs"].items()}
    t.used, t.peak = int(snap["used"]), int(snap["peak"])
    t.inserted_blocks = int(snap["inserted_blocks"])
    t.evicted_blocks = int(snap["evicted_blocks"])
    t.evicted_sessions = int(snap["evicted_sessions"])
