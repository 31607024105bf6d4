"""`BlockStore`: the pure model of the 3FS-like KV store, with its index.

The store holds, per session, the leading run of Full Blocks persisted so far: decode persists
each block as it fills, in order, so a session's stored blocks are always a prefix. `persist`
refuses a write past the end of that prefix (`BlockGap`); `persist_any_order`, used by the
engines, parks such a write until the earlier one lands (writes complete out of order).
A turn's KV hit is `prefix_blocks`: real only because earlier turns persisted it.

What is stored per block is the checksum its producer wrote. A block is only accepted after
the producer's digest matched the chain, so that checksum *is* the chain's, and the store
keeps no copy of it: it records the stored-run length per session plus the XOR damage that
`corrupt` (fault injection) did to individual blocks, and every digest it reads is the chain's
prefix-sum digest with that damage applied. Persist and read are O(1) and cost no memory per
block; a damaged block makes every read covering it fail verification with `BlockCorrupted`
naming session, range and block.

Index: each session's root hash h_0 maps to the session and the session's cached chain gives
the rest, so `lookup_prefix(hashes)` answers "how many leading blocks of this chained-hash list
are stored" (trace replay) without a per-block dict.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dualpath.model.blocks.chain import MASK64, ChainRegistry
from dualpath.model.blocks.errors import BlockCorrupted, BlockGap, BlockMissing
from dualpath.model.blocks.range import BlockRange


class _Stored:
    """One chain's own stored blocks [base, n) and the XOR masks damaging some of them."""

    __slots__ = ("damage", "n")

    def __init__(self, base: int) -> None:
        self.n = base
        self.damage: dict[int, int] = {}  # block -> mask; stored checksum = c_block ^ mask


class BlockStore:
    """Persisted Full Blocks of every session, verified against the chain on write and read.

    Content-addressed: a block belongs to the chain that owns it (`ChainRegistry.owner_ranges`),
    so a block written through one session is a hit for every session that forks it.
    """

    __slots__ = ("_by_root", "_parked", "_sessions", "blocks_persisted", "blocks_read", "chains")

    def __init__(self, chains: ChainRegistry | None = None) -> None:
        # Engines and the store must share one registry (or equal salts): the digests
        # producers send are checked against it.
        self.chains = chains if chains is not None else ChainRegistry()
        self._sessions: dict[int, _Stored] = {}  # owner chain -> its own stored run
        self._by_root: dict[int, int] = {}  # h_0 -> root session
        self._parked: dict[int, list[BlockRange]] = {}  # owner -> own writes past a gap
        self.blocks_persisted = 0  # new blocks added (re-persisting stored blocks adds none)
        self.blocks_read = 0  # blocks covered by successful read_digest calls

    # --- writes -----------------------------------------------------------------------
    def persist(self, rng: BlockRange, digest: int) -> int:
        """Store `rng` written with `digest`; return how many blocks were new.

        Raises `BlockGap` if a part of `rng` starts past its owner's stored run and
        `BlockCorrupted` if the producer's digest is not the chain's; nothing is stored then.
        """
        self._check_digest(rng, digest)
        parts = self.chains.owner_ranges(rng)
        for part in parts:
            if part.start > self.own_end(part.session):
                raise BlockGap(part, self.own_end(part.session))
        return sum(self._add(part) for part in parts)

    def persist_any_order(self, rng: BlockRange, digest: int) -> int:
        """Like `persist`, for writes that may complete out of order (a small flush can
        overtake a large one on a shared link, as 3FS writes do): a part past its owner's
        stored run is checked, then parked until the gap before it is filled; it becomes
        visible (a hit) only then, since a chained hash needs its whole prefix. Returns the
        blocks that became stored by this call, parked ones included."""
        self._check_digest(rng, digest)
        added = 0
        for part in self.chains.owner_ranges(rng):
            if part.start > self.own_end(part.session):
                parked = self._parked.setdefault(part.session, [])
                if part not in parked:  # a write sent again (a retry) parks once
                    parked.append(part)
                continue
            added += self._add(part) + self._unpark(part.session)
        return added

    def _check_digest(self, rng: BlockRange, digest: int) -> None:
        expected = self.chains.expected_digest(rng)
        if digest != expected:
            raise BlockCorrupted(rng, expected, digest, None, "persisted")

    def _add(self, part: BlockRange) -> int:
        """Extend the owner's run with `part` (which starts within it); new blocks."""
        st = self._sessions.get(part.session)
        if st is None:
            st = self._sessions[part.session] = _Stored(self._base(part.session))
            if self.chains.fork_of(part.session) is None:
                self._by_root[self.chains.block_hash(part.session, 0)] = part.session
        if part.stop <= st.n:
            return 0
        added = part.stop - st.n
        st.n = part.stop
        self.blocks_persisted += added
        return added

    def _unpark(self, owner: int) -> int:
        parked = self._parked.get(owner)
        added = 0
        while parked:
            n = self.own_end(owner)
            ready = [r for r in parked if r.start <= n]
            if not ready:
                break
            for r in ready:
                parked.remove(r)
                added += self._add(r)
        if parked is not None and not parked:
            del self._parked[owner]
        return added

    def received(self, rng: BlockRange) -> bool:
        """Every block of `rng` is stored or parked: a write of it sent again (its
        acknowledgement was refused or lost) carries nothing new."""
        return all(
            part.stop <= self.own_end(part.session) or part in self._parked.get(part.session, ())
            for part in self.chains.owner_ranges(rng)
        )

    def parked_blocks(self) -> int:
        """Blocks written but not yet visible because an earlier write is still in flight."""
        return sum(r.nblocks for rs in self._parked.values() for r in rs)

    def corrupt(self, session: int, block_index: int) -> None:
        """Fault injection: invert the stored checksum of one block (twice restores it)."""
        (part,) = self.chains.owner_ranges(BlockRange(session, block_index, block_index + 1))
        st = self._stored(part)
        mask = st.damage.pop(block_index, 0) ^ MASK64
        if mask:
            st.damage[block_index] = mask

    # --- reads ------------------------------------------------------------------------
    def own_end(self, session: int) -> int:
        """End of the chain's own stored run (its fork point when it stored nothing yet)."""
        st = self._sessions.get(session)
        return st.n if st is not None else self._base(session)

    def prefix_blocks(self, session: int) -> int:
        """Length of the session's stored leading run: the blocks a new turn can hit."""
        f = self.chains.fork_of(session)
        if f is not None:
            shared = self.prefix_blocks(f.parent)
            if shared < f.at:  # a chained hash needs its whole prefix
                return shared
        return self.own_end(session)

    def read_digest(self, rng: BlockRange) -> int:
        """Digest of the *stored* checksums of `rng`; `BlockMissing` if any block is absent."""
        parts = [(part, self._stored(part)) for part in self.chains.owner_ranges(rng)]
        digest = self.chains.expected_digest(rng)
        for part, st in parts:
            if not st.damage:
                continue
            chain = self.chains.chain(part.session)
            for block, mask in st.damage.items():
                if part.start <= block < part.stop:
                    c = chain.checksum(block)
                    digest = (digest + (c ^ mask) - c) & MASK64
        self.blocks_read += rng.nblocks
        return digest

    def verify(self, rng: BlockRange, digest_from_store: int) -> None:
        """Check a digest read for `rng` against the chain; `BlockCorrupted` if it differs."""
        expected = self.chains.expected_digest(rng)
        if digest_from_store != expected:
            raise BlockCorrupted(rng, expected, digest_from_store, self._first_bad(rng), "read")

    def read_verified(self, rng: BlockRange) -> int:
        """`read_digest` then `verify`: the consumer's whole check in one call."""
        digest = self.read_digest(rng)
        self.verify(rng, digest)
        return digest

    def lookup_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading entries of a chained-hash list name blocks this store holds
        (looked up along the root chain whose h_0 matches)."""
        if not hashes:
            return 0
        session = self._by_root.get(int(hashes[0]))
        if session is None:
            return 0
        n = min(len(hashes), self.prefix_blocks(session))
        want = np.asarray([int(h) for h in hashes[:n]], dtype=np.uint64)
        have = self.chains.chain(session).hashes(0, n)
        mismatch = np.flatnonzero(want != have)
        return int(mismatch[0]) if len(mismatch) else n

    # --- accounting -------------------------------------------------------------------
    def bytes_persisted(self, block_bytes: int) -> int:
        return self.blocks_persisted * block_bytes

    def bytes_read(self, block_bytes: int) -> int:
        return self.blocks_read * block_bytes

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    @property
    def stored_blocks(self) -> int:
        return sum(st.n - self._base(s) for s, st in self._sessions.items())

    def stored_runs(self) -> dict[int, int]:
        """Owner chain -> end of its own stored run (what the Redis block index records)."""
        return {s: st.n for s, st in self._sessions.items()}

    @property
    def corrupted(self) -> frozenset[tuple[int, int]]:
        """(session, block) pairs currently damaged by `corrupt`."""
        return frozenset((s, b) for s, st in self._sessions.items() for b in st.damage)

    # --- helpers ----------------------------------------------------------------------
    def _base(self, session: int) -> int:
        f = self.chains.fork_of(session)
        return f.at if f is not None else 0

    def _stored(self, part: BlockRange) -> _Stored:
        """The owner's record of `part` (one owner's blocks); `BlockMissing` if absent."""
        st = self._sessions.get(part.session)
        end = st.n if st is not None else self._base(part.session)
        if st is None or part.stop > end:
            raise BlockMissing(part, max(part.start, end))
        return st

    def _first_bad(self, rng: BlockRange) -> int | None:
        """First block of `rng` whose stored checksum is damaged, if any."""
        bad = [
            b
            for part in self.chains.owner_ranges(rng)
            if (st := self._sessions.get(part.session)) is not None
            for b in st.damage
            if part.start <= b < min(part.stop, st.n)
        ]
        return min(bad) if bad else None
