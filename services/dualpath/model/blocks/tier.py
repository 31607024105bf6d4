"""A host-DRAM KV tier (pure model, no I/O): per node, the leading run of each session's
blocks that the node keeps in host memory, with a byte capacity and an eviction policy.

A session's blocks form one chain (block i needs blocks 0..i-1 to be of use), so what a
node holds of a session is a leading run [0, n): the shape of one branch of SGLang's radix
tree. Eviction is leaf first, as the radix cache evicts (it "walks a branch from its tip
toward the root"): the victim session loses blocks from its tail, only as many as are
needed, and leaves the tier once it has none. Which session is the victim:

- `lru`: the one matched or filled least recently (SGLang's default);
- `lfu`: the one matched by the fewest reads, least recently on a tie (SGLang's `lfu`:
  "hit count ... all of them fall back to least-recently-used order within a tie"). In an
  agentic workload every turn of a session matches its prefix, so this keeps the sessions
  that have come back most often, i.e. the long-running ones with the longest contexts,
  whose hits save the most bytes; a new session's first turn (nothing to hit) cannot push
  them out, where LRU lets any burst of new sessions flush them.

Capacity is counted in whole blocks (storage and the tier move Full Blocks), separately
from the DRAM read/transfer buffers (`hardware.dram_buffer_gb`). See docs/tier.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Eviction = Literal["lru", "lfu"]


class DramTier:
    """One node's tier: `capacity` blocks, sessions -> cached leading run length."""

    def __init__(self, name: str, capacity: int, eviction: Eviction = "lru") -> None:
        if capacity < 0:
            raise ValueError(f"{name}: tier capacity must be >= 0 blocks")
        if eviction not in ("lru", "lfu"):
            raise ValueError(f"tier.eviction={eviction!r}: accepted: lru, lfu")
        self.name = name
        self.capacity = capacity
        self.eviction = eviction
        self.runs: dict[int, int] = {}  # session -> blocks [0, n) held
        self.used = 0  # blocks held
        self.peak = 0
        self.inserted_blocks = 0
        self.evicted_blocks = 0
        self.evicted_sessions = 0  # sessions that lost their last block
        self._hits: dict[int, int] = {}
        self._stamp: dict[int, int] = {}
        self._clock = 0
        # (hits or 0, stamp, session); stale entries are skipped when they surface
        self._heap: list[tuple[int, int, int]] = []
        # When a list: every session whose held run changed (filled or evicted) is appended,
        # for a runtime that mirrors this tier elsewhere (the process runtime's scheduler).
        self.journal: list[int] | None = None

    def cached(self, session: int) -> int:
        return self.runs.get(session, 0)

    def touch(self, session: int, *, hit: bool = False) -> None:
        """A read matched (`hit`) or a fill reached this session: it becomes the most
        recent; a match also counts for `lfu`."""
        if session not in self.runs:
            return
        if hit:
            self._hits[session] = self._hits.get(session, 0) + 1
        self._clock += 1
        self._stamp[session] = self._clock
        heapq.heappush(self._heap, (self._key(session), self._clock, session))
        if len(self._heap) > 4 * len(self.runs) + 64:  # drop stale entries (one per touch)
            self._heap = [(self._key(s), t, s) for s, t in self._stamp.items()]
            heapq.heapify(self._heap)

    def fill(self, session: int, start: int, stop: int) -> int:
        """Blocks [start, stop) of `session` passed through this node's DRAM: keep them
        if they extend the held run without a gap (a chain is of use only from block 0).
        Makes room by evicting other sessions; a run longer than the whole tier keeps its
        first `capacity` blocks. Returns the blocks added."""
        have = self.runs.get(session, 0)
        if start > have or stop <= have or self.capacity == 0:
            if have:
                self.touch(session)
            return 0
        want = min(stop, self.capacity) - have
        if want <= 0:
            self.touch(session)
            return 0
        self._make_room(want, session)
        want = min(want, self.capacity - self.used)  # (every other session is evictable)
        if want <= 0:
            return 0
        self.runs[session] = have + want
        self.used += want
        if self.journal is not None:
            self.journal.append(session)
        self.peak = max(self.peak, self.used)
        self.inserted_blocks += want
        self.touch(session)
        return want

    def _key(self, session: int) -> int:
        return self._hits.get(session, 0) if self.eviction == "lfu" else 0

    def _make_room(self, need: int, protect: int) -> None:
        """Evict tail blocks of the lowest-scored sessions until `need` blocks are free."""
        skipped: list[tuple[int, int, int]] = []
        while self.capacity - self.used < need and self._heap:
            entry = self._heap[0]
            key, stamp, s = entry
            if s not in self.runs or self._stamp.get(s) != stamp or self._key(s) != key:
                heapq.heappop(self._heap)  # stale: the session moved or left
                continue
            if s == protect:
                skipped.append(heapq.heappop(self._heap))
                continue
            take = min(self.runs[s], need - (self.capacity - self.used))
            self.runs[s] -= take
            self.used -= take
            self.evicted_blocks += take
            if self.journal is not None:
                self.journal.append(s)
            if self.runs[s] == 0:
                heapq.heappop(self._heap)
                del self.runs[s], self._stamp[s]
                self._hits.pop(s, None)
                self.evicted_sessions += 1
        for entry in skipped:
            heapq.heappush(self._heap, entry)


@dataclass(frozen=True, slots=True)
class TierRead:
    """Where a hit of `hit` blocks comes from: [0, local) from the reading node's DRAM,
    [local, end) from `src`'s DRAM over the compute network, [end, hit) from storage."""

    local: int
    end: int
    src: str  # "" when nothing comes from another node


class TierSet:
    """Every node's tier, and where a read finds its blocks (a Mooncake-store-like pool:
    any node's DRAM can serve another node when `remote` is on)."""

    def __init__(
        self,
        nodes: Iterable[str],
        capacity: int,
        eviction: Eviction,
        *,
        remote: bool = True,
        block_tokens: int = 64,
    ) -> None:
        self.tiers = {n: DramTier(n, capacity, eviction) for n in nodes}
        self.remote = remote
        self.block_tokens = block_tokens

    def cached(self, session: int, node: str) -> int:
        return self.tiers[node].cached(session)

    def lookup(self, session: int, node: str, hit: int) -> TierRead:
        """Plan a read of blocks [0, hit) on `node`: the local run first, then the longest
        run on another node if it reaches further, storage for the rest. The tiers used
        are touched (a match: recency, and a hit for lfu)."""
        mine = self.tiers[node]
        local = min(hit, mine.cached(session))
        src, end = "", local
        if self.remote and local < hit:
            for name, tier in self.tiers.items():
                n = min(hit, tier.cached(session))
                if n > end and name != node:
                    src, end = name, n
        if local:
            mine.touch(session, hit=True)
        if src:
            self.tiers[src].touch(session, hit=True)
        return TierRead(local, end, src)

    def fill(self, node: str, session: int, start: int, stop: int) -> int:
        return self.tiers[node].fill(session, start, stop)
