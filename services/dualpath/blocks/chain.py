"""Chained block hashes and the checksums every consumer verifies against.

Block i of session s has identity h_i and checksum c_i, the two halves of one 16-byte
blake2b(h_{i-1} || s || i) (h_{-1} = 0, plus a run-wide salt). Like vLLM's prefix-cache keys,
h_i names the whole prefix up to block i, so a hit is found by hash and a block can never be
mistaken for another session's or position's. c_i is what producers send with the (virtual)
payload and consumers verify; a range's digest is sum(c_i) mod 2^64, so with per-session
prefix sums the digest of any range costs O(1).

The chain is inherently sequential, so it is computed lazily, only as far as a session's
blocks are actually used, and cached (about 1.5 us per block in pure Python, 16 bytes kept
per block). Per-call work is kept free of small numpy operations because decode persists a
block or two at a time, millions of times per run.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from dualpath.blocks.range import BlockRange

U64 = npt.NDArray[np.uint64]
MASK64 = (1 << 64) - 1
_PERSON = b"dualpath/kv-blk"  # domain separation from any other blake2b use


def range_sum(prefix: U64, start: int, stop: int) -> int:
    """sum mod 2^64 of the values behind `prefix` over [start, stop), via Python ints.

    Python ints on purpose: numpy *scalar* uint64 arithmetic warns on wrap-around.
    """
    return (int(prefix[stop]) - int(prefix[start])) & MASK64


def grown(arr: U64, needed: int) -> U64:
    """`arr` itself if it holds `needed` entries, else a copy with doubled capacity."""
    if needed <= len(arr):
        return arr
    out = np.zeros(max(needed, 2 * len(arr)), dtype=np.uint64)
    out[: len(arr)] = arr
    return out


class SessionChain:
    """The lazily extended hash chain of one session, with checksum prefix sums."""

    __slots__ = ("_hashes", "_key", "_n", "_prefix", "_salt", "session")

    def __init__(self, session: int, salt: int = 0) -> None:
        if session < 0:
            raise ValueError(f"session must be >= 0, got {session}")
        self.session = session
        self._salt = salt.to_bytes(16, "little", signed=False)
        self._key = session.to_bytes(8, "little", signed=False)
        self._n = 0
        self._hashes: U64 = np.zeros(16, dtype=np.uint64)
        self._prefix: U64 = np.zeros(17, dtype=np.uint64)  # _prefix[k] = sum(c_0..c_{k-1})

    def __len__(self) -> int:
        """Blocks computed so far (not a limit: the chain extends on demand)."""
        return self._n

    def ensure(self, n: int) -> None:
        """Compute the chain up to (at least) block n-1."""
        if n <= self._n:
            return
        self._hashes = grown(self._hashes, n)
        self._prefix = grown(self._prefix, n + 1)
        hashes, prefix = self._compute(self._n, n)
        self._hashes[self._n : n] = np.frombuffer(hashes, dtype="<u8")
        self._prefix[self._n + 1 : n + 1] = np.frombuffer(prefix, dtype="<u8")
        self._n = n

    def _compute(self, start: int, stop: int) -> tuple[bytes, bytes]:
        """Hashes and checksum prefix sums of blocks [start, stop), little-endian packed."""
        prev = int(self._hashes[start - 1]).to_bytes(8, "little") if start else bytes(8)
        running = int(self._prefix[start])
        key, salt, blake = self._key, self._salt, hashlib.blake2b
        hashes: list[bytes] = []
        sums: list[bytes] = []
        for i in range(start, stop):
            d = blake(
                prev + key + i.to_bytes(8, "little"), digest_size=16, person=_PERSON, salt=salt
            ).digest()
            prev = d[:8]
            hashes.append(prev)
            running = (running + int.from_bytes(d[8:], "little")) & MASK64
            sums.append(running.to_bytes(8, "little"))
        return b"".join(hashes), b"".join(sums)

    def block_hash(self, index: int) -> int:
        self.ensure(index + 1)
        return int(self._hashes[index])

    def checksum(self, index: int) -> int:
        return self.digest(index, index + 1)

    def hashes(self, start: int, stop: int) -> U64:
        """Read-only view of h_start..h_{stop-1}."""
        self.ensure(stop)
        view = self._hashes[start:stop]
        view.flags.writeable = False
        return view

    def checksums(self, start: int, stop: int) -> U64:
        self.ensure(stop)
        return np.diff(self._prefix[start : stop + 1])  # array op: wraps mod 2^64 silently

    def digest(self, start: int, stop: int) -> int:
        self.ensure(stop)
        return range_sum(self._prefix, start, stop)


class ChainRegistry:
    """Every session's chain, created on first use. One per run; `salt` separates runs."""

    __slots__ = ("_chains", "salt")

    def __init__(self, salt: int = 0) -> None:
        if not 0 <= salt < 1 << 128:
            raise ValueError(f"salt must fit in 128 bits, got {salt}")
        self.salt = salt
        self._chains: dict[int, SessionChain] = {}

    def chain(self, session: int) -> SessionChain:
        ch = self._chains.get(session)
        if ch is None:
            ch = self._chains[session] = SessionChain(session, self.salt)
        return ch

    def block_hash(self, session: int, index: int) -> int:
        return self.chain(session).block_hash(index)

    def hashes(self, rng: BlockRange) -> U64:
        return self.chain(rng.session).hashes(rng.start, rng.stop)

    def expected_checksums(self, rng: BlockRange) -> U64:
        return self.chain(rng.session).checksums(rng.start, rng.stop)

    def expected_digest(self, rng: BlockRange) -> int:
        """What a correct copy of `rng` must digest to: sum of its checksums mod 2^64."""
        return self.chain(rng.session).digest(rng.start, rng.stop)

    def target_of(self, session: int, block: int, n_targets: int) -> int:
        """Storage target holding the block: striped by its chained hash, as 3FS stripes chunks."""
        _check_targets(n_targets)
        return self.block_hash(session, block) % n_targets

    def targets(self, rng: BlockRange, n_targets: int) -> npt.NDArray[np.int64]:
        """`target_of` for every block of `rng`, vectorised (per-target queue accounting)."""
        _check_targets(n_targets)
        return (self.hashes(rng) % np.uint64(n_targets)).astype(np.int64)


def _check_targets(n_targets: int) -> None:
    if n_targets < 1:
        raise ValueError(f"n_targets must be >= 1, got {n_targets}")
