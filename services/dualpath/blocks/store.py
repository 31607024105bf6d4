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

from dualpath.blocks.chain import MASK64, ChainRegistry
from dualpath.blocks.errors import BlockCorrupted, BlockGap, BlockMissing
from dualpath.blocks.range import BlockRange


class _Stored:
    """One session's stored blocks [0, n) and the XOR masks damaging some of them."""

    __slots__ = ("damage", "n")

    def __init__(self) -> None:
        self.n = 0
        self.damage: dict[int, int] = {}  # block -> mask; stored checksum = c_block ^ mask


class BlockStore:
    """Persisted Full Blocks of every session, verified against the chain on write and read."""

    __slots__ = ("_by_root", "_parked", "_sessions", "blocks_persisted", "blocks_read", "chains")

    def __init__(self, chains: ChainRegistry | None = None) -> None:
        # Engines and the store must share one registry (or equal salts): the digests
        # producers send are checked against it.
        self.chains = chains if chains is not None else ChainRegistry()
        self._sessions: dict[int, _Stored] = {}
        self._by_root: dict[int, int] = {}  # h_0 -> session
        self._parked: dict[int, list[BlockRange]] = {}  # session -> writes past a gap
        self.blocks_persisted = 0  # new blocks added (re-persisting stored blocks adds none)
        self.blocks_read = 0  # blocks covered by successful read_digest calls

    # --- writes -----------------------------------------------------------------------
    def persist(self, rng: BlockRange, digest: int) -> int:
        """Store `rng` written with `digest`; return how many blocks were new.

        Raises `BlockGap` if `rng` starts past the stored prefix and `BlockCorrupted` if the
        producer's digest is not the chain's; nothing is stored then.
        """
        st = self._sessions.get(rng.session)
        stored = st.n if st is not None else 0
        if rng.start > stored:
            raise BlockGap(rng, stored)
        expected = self.chains.expected_digest(rng)
        if digest != expected:
            raise BlockCorrupted(rng, expected, digest, None, "persisted")
        if rng.stop <= stored:
            return 0
        if st is None:
            st = self._sessions[rng.session] = _Stored()
            self._by_root[self.chains.block_hash(rng.session, 0)] = rng.session
        st.n = rng.stop
        added = rng.stop - stored
        self.blocks_persisted += added
        return added

    def persist_any_order(self, rng: BlockRange, digest: int) -> int:
        """Like `persist`, for writes that may complete out of order (a small flush can
        overtake a large one on a shared link, as 3FS writes do): a range past the stored
        prefix is checked, then parked until the gap before it is filled; it becomes visible
        (a hit) only then, since a chained hash needs its whole prefix. Returns the blocks
        that became stored by this call, parked ones included."""
        stored = self.prefix_blocks(rng.session)
        if rng.start > stored:
            expected = self.chains.expected_digest(rng)
            if digest != expected:
                raise BlockCorrupted(rng, expected, digest, None, "persisted")
            self._parked.setdefault(rng.session, []).append(rng)
            return 0
        added = self.persist(rng, digest)
        parked = self._parked.get(rng.session)
        while parked:
            n = self.prefix_blocks(rng.session)
            ready = [r for r in parked if r.start <= n]
            if not ready:
                break
            for r in ready:
                parked.remove(r)
                added += self.persist(r, self.chains.expected_digest(r))
        if parked is not None and not parked:
            del self._parked[rng.session]
        return added

    def parked_blocks(self) -> int:
        """Blocks written but not yet visible because an earlier write is still in flight."""
        return sum(r.nblocks for rs in self._parked.values() for r in rs)

    def corrupt(self, session: int, block_index: int) -> None:
        """Fault injection: invert the stored checksum of one block (twice restores it)."""
        st = self._stored(BlockRange(session, block_index, block_index + 1))
        mask = st.damage.pop(block_index, 0) ^ MASK64
        if mask:
            st.damage[block_index] = mask

    # --- reads ------------------------------------------------------------------------
    def prefix_blocks(self, session: int) -> int:
        """Length of the session's stored leading run: the blocks a new turn can hit."""
        st = self._sessions.get(session)
        return st.n if st is not None else 0

    def read_digest(self, rng: BlockRange) -> int:
        """Digest of the *stored* checksums of `rng`; `BlockMissing` if any block is absent."""
        st = self._stored(rng)
        digest = self.chains.expected_digest(rng)
        if st.damage:
            chain = self.chains.chain(rng.session)
            for block, mask in st.damage.items():
                if rng.start <= block < rng.stop:
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
        """How many leading entries of a chained-hash list name blocks this store holds."""
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
        return sum(st.n for st in self._sessions.values())

    @property
    def corrupted(self) -> frozenset[tuple[int, int]]:
        """(session, block) pairs currently damaged by `corrupt`."""
        return frozenset((s, b) for s, st in self._sessions.items() for b in st.damage)

    # --- helpers ----------------------------------------------------------------------
    def _stored(self, rng: BlockRange) -> _Stored:
        st = self._sessions.get(rng.session)
        if st is None or rng.stop > st.n:
            raise BlockMissing(rng, max(rng.start, st.n if st is not None else 0))
        return st

    def _first_bad(self, rng: BlockRange) -> int | None:
        """First block of `rng` whose stored checksum is damaged, if any."""
        st = self._sessions.get(rng.session)
        if st is None:
            return None
        bad = [b for b in st.damage if rng.start <= b < min(rng.stop, st.n)]
        return min(bad) if bad else None
