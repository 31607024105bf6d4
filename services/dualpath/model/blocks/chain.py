"""Chained block hashes and the checksums every consumer verifies against.

Block i of session s has identity h_i and checksum c_i, the two halves of one 16-byte
blake2b(h_{i-1} || s || i) (h_{-1} = 0, plus a run-wide salt). Like vLLM's prefix-cache keys,
h_i names the whole prefix up to block i, so a hit is found by hash and a block can never be
mistaken for another session's or position's. c_i is what producers send with the (virtual)
payload and consumers verify; a range's digest is sum(c_i) mod 2^64, so with per-session
prefix sums the digest of any range costs O(1).

Content addressing: a session may *fork* another at block k (`Fork`): its blocks [0, k) are
the other's, so two prompts with a common prefix (a shared system prompt, a trace's equal
block ids, a sub-agent) hit the same stored KV, as vLLM's automatic prefix caching does.

The chain is inherently sequential, so it is computed lazily, only as far as a session's
blocks are actually used, and cached (about 0.4 us a block compiled, 0.5 in pure Python;
16 bytes kept per block). Per-call work is kept free of small numpy operations because
decode persists a block or two at a time, millions of times per run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dualpath.model.blocks.range import BlockRange

U64 = npt.NDArray[np.uint64]
MASK64: Final = (1 << 64) - 1
_PERSON = b"dualpath/kv-blk"  # domain separation from any other blake2b use
LOOKAHEAD: Final = 32  # blocks `SessionChain.ensure` computes past the one asked for, at most


def grown(arr: U64, needed: int) -> U64:
    """`arr` itself if it holds `needed` entries, else a copy with doubled capacity."""
    if needed <= len(arr):
        return arr
    out = np.zeros(max(needed, 2 * len(arr)), dtype=np.uint64)
    out[: len(arr)] = arr
    return out


class SessionChain:
    """The lazily extended hash chain of one session, with checksum prefix sums.

    A *forked* chain shares its first `base` blocks with `parent` (content addressing: two
    prompts with the same leading blocks name the same KV); only blocks from `base` on are
    its own, hashed from the parent's h_{base-1} and this session's id. Nothing of the
    parent is copied, so a fork costs O(1) and a read spanning both sides adds the two
    digests.
    """

    __slots__ = (
        "_hashes", "_key", "_last", "_n", "_prefix", "_prefix_view", "_salt", "base", "parent",
        "session",
    )  # fmt: skip

    def __init__(
        self, session: int, salt: int = 0, parent: SessionChain | None = None, base: int = 0
    ) -> None:
        if session < 0:
            raise ValueError(f"session must be >= 0, got {session}")
        if (parent is None) != (base == 0) or base < 0:
            raise ValueError(f"a fork needs a parent and base >= 1, got base {base}")
        self.session = session
        self.parent = parent
        self.base = base
        self._salt = salt.to_bytes(16, "little", signed=False)
        self._key = session.to_bytes(8, "little", signed=False)
        self._n = base  # own blocks computed: [base, _n)
        self._hashes: U64 = np.zeros(16, dtype=np.uint64)  # own block base + k at [k]
        self._prefix: U64 = np.zeros(17, dtype=np.uint64)  # _prefix[k] = sum of own c_0..c_k-1
        # The same memory as a memoryview: indexing one is a C call that gives a Python int,
        # where numpy's `item` is a method call (a range's digest reads two, on every read and
        # persist). Refreshed whenever `_prefix` is replaced by a grown copy.
        self._prefix_view = self._prefix.data
        # The last digest asked for, as (start, stop, digest): a range's producer and its
        # consumer ask for the same one in turn (a persist and the store's check, a read
        # and its verification), and a digest never changes once its blocks exist.
        self._last = (-1, -1, 0)

    def __len__(self) -> int:
        """Blocks computed so far (not a limit: the chain extends on demand)."""
        return self._n

    def ensure(self, n: int) -> None:
        """Compute the chain up to (at least) block n-1.

        A step shorter than LOOKAHEAD goes further: decode asks for one block at a time,
        and each call pays numpy slicing and the running sums' set-up (≈ 3 us) next to
        ≈ 1 us per block. It grows by as much as the chain already holds, LOOKAHEAD at most,
        so a chain read once for a few blocks stays short. Hashes do not depend on when
        they are computed.
        """
        step = n - self._n
        if step <= 0:
            return
        if step < LOOKAHEAD:
            n = self._n + min(LOOKAHEAD, max(step, self._n - self.base))
        own = n - self.base
        self._hashes = grown(self._hashes, own)
        prefix_arr = grown(self._prefix, own + 1)
        if prefix_arr is not self._prefix:
            self._prefix = prefix_arr
            self._prefix_view = prefix_arr.data
        done = self._n - self.base
        hashes, sums = self._compute(self._n, n)
        self._hashes[done:own] = hashes
        # Checksum prefix sums: uint64 arithmetic wraps mod 2^64, as the digests' does.
        prefix = self._prefix
        np.cumsum(sums, out=prefix[done + 1 : own + 1])
        prefix[done + 1 : own + 1] += prefix[done]
        self._n = n

    def _prev_hash(self, start: int) -> bytes:
        if start > self.base:
            return int(self._hashes[start - 1 - self.base]).to_bytes(8, "little")
        if self.parent is not None:
            return self.parent.block_hash(start - 1).to_bytes(8, "little")
        return bytes(8)

    def _compute(self, start: int, stop: int) -> tuple[U64, U64]:
        """h_i and c_i of own blocks [start, stop): the two halves of each block's digest."""
        prev = self._prev_hash(start)
        key = self._key
        # One keyed-and-salted hasher, copied per block: parsing blake2b's keyword
        # arguments cost more than the hash itself (1.4 vs 0.6 us per block).
        copy = hashlib.blake2b(digest_size=16, person=_PERSON, salt=self._salt).copy
        digests: list[bytes] = []
        for i in range(start, stop):
            h = copy()
            h.update(prev + key + i.to_bytes(8, "little"))
            d = h.digest()
            prev = d[:8]
            digests.append(d)
        pairs = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]

    def block_hash(self, index: int) -> int:
        if index < self.base:
            assert self.parent is not None
            return self.parent.block_hash(index)
        self.ensure(index + 1)
        return int(self._hashes[index - self.base])

    def checksum(self, index: int) -> int:
        return self.digest(index, index + 1)

    def hashes(self, start: int, stop: int) -> U64:
        """Read-only h_start..h_{stop-1} (a view unless the range spans a fork)."""
        if start < self.base:
            assert self.parent is not None
            if stop <= self.base:
                return self.parent.hashes(start, stop)
            out = np.concatenate(
                [self.parent.hashes(start, self.base), self.hashes(self.base, stop)]
            )
            out.flags.writeable = False
            return out
        self.ensure(stop)
        view = self._hashes[start - self.base : stop - self.base]
        view.flags.writeable = False
        return view

    def checksums(self, start: int, stop: int) -> U64:
        if start < self.base:
            assert self.parent is not None
            if stop <= self.base:
                return self.parent.checksums(start, stop)
            own = self.checksums(self.base, stop)
            return np.concatenate([self.parent.checksums(start, self.base), own])
        self.ensure(stop)
        # array op: wraps mod 2^64 silently
        return np.diff(self._prefix[start - self.base : stop - self.base + 1])

    def digest(self, start: int, stop: int) -> int:
        last_start, last_stop, last = self._last
        if start == last_start and stop == last_stop:
            return last
        value = self._digest(start, stop)
        self._last = (start, stop, value)
        return value

    def _digest(self, start: int, stop: int) -> int:
        shared = 0
        if start < self.base:
            assert self.parent is not None
            shared = self.parent.digest(start, min(stop, self.base))
            if stop <= self.base:
                return shared
            start = self.base
        self.ensure(stop)
        view = self._prefix_view
        own = (view[stop - self.base] - view[start - self.base]) & MASK64
        return (shared + own) & MASK64


@dataclass(frozen=True, slots=True)
class Fork:
    """Blocks [0, at) of `session` are blocks [0, at) of `parent`: the same content."""

    session: int
    parent: int
    at: int


class ChainRegistry:
    """Every session's chain, created on first use. One per run; `salt` separates runs.

    Forks (shared prefixes) are declared before a session's chain is first used, by
    whoever knows the content (a trace's block ids, the front door's prefix hashes); every
    process of a run declares the same ones, so digests agree everywhere.
    """

    __slots__ = ("_chains", "_forks", "_last", "salt")

    def __init__(self, salt: int = 0) -> None:
        if not 0 <= salt < 1 << 128:
            raise ValueError(f"salt must fit in 128 bits, got {salt}")
        self.salt = salt
        self._chains: dict[int, SessionChain] = {}
        self._forks: dict[int, Fork] = {}
        self._last: SessionChain | None = None  # the chain asked for last (asked in runs)

    def declare(self, fork: Fork) -> None:
        """Record that `fork.session` shares its first `fork.at` blocks with `fork.parent`.

        Idempotent; a conflicting redeclaration, a cycle, or a fork of a session whose chain
        is already in use raises ValueError.
        """
        known = self._forks.get(fork.session)
        if known == fork:
            return
        if known is not None:
            raise ValueError(f"session {fork.session} already forks as {known}, not {fork}")
        if fork.at < 1 or fork.session == fork.parent or min(fork.session, fork.parent) < 0:
            raise ValueError(f"invalid fork {fork}: need at >= 1 and two distinct sessions")
        if fork.session in self._chains:
            raise ValueError(f"session {fork.session} is in use: declare its fork before use")
        if fork.session in (f.parent for f in self.lineage(fork.parent)):
            raise ValueError(f"fork {fork} would make a cycle")
        self._forks[fork.session] = fork

    def declare_all(self, forks: Iterable[Fork]) -> None:
        for f in forks:
            self.declare(f)

    def fork_of(self, session: int) -> Fork | None:
        return self._forks.get(session)

    def lineage(self, session: int) -> list[Fork]:
        """The forks from the root chain down to `session` (empty for a root chain)."""
        out: list[Fork] = []
        f = self._forks.get(session)
        while f is not None:
            out.append(f)
            f = self._forks.get(f.parent)
        out.reverse()
        return out

    def owner_ranges(self, rng: BlockRange) -> list[BlockRange]:
        """`rng` split by who owns each block: an ancestor for blocks below a fork point,
        the session itself above it. Ascending; empty for an empty range."""
        out: list[BlockRange] = []
        s, start, stop = rng.session, rng.start, rng.stop
        while start < stop:
            f = self._forks.get(s)
            if f is None or start >= f.at:
                out.append(BlockRange(s, start, stop))
                break
            if stop > f.at:
                out.append(BlockRange(s, f.at, stop))
                stop = f.at
            s = f.parent
        out.reverse()
        return out

    def chain(self, session: int) -> SessionChain:
        ch = self._last
        if ch is not None and ch.session == session:
            return ch
        ch = self._chains.get(session)
        if ch is None:
            f = self._forks.get(session)
            if f is None:
                ch = SessionChain(session, self.salt)
            else:
                ch = SessionChain(session, self.salt, self.chain(f.parent), f.at)
            self._chains[session] = ch
        self._last = ch
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
