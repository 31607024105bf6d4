"""Content-addressed prefix index: which KV chain a prompt's blocks live on.

Block i's hash covers every token up to the end of block i (h_i = blake2b(h_{i-1} ||
tokens of block i)), so equal hashes mean equal prefixes, not just equal blocks. Only full
blocks are hashed: a partial tail cannot be reused from the KV store anyway.

The index maps every recorded block hash to the chain (emulator session) that first
recorded it, so — as vLLM's automatic prefix caching and a hash-keyed KV store do — a
prompt sharing leading blocks with *any* earlier prompt (another user's system prompt, an
earlier turn whose last block differs) reuses that chain's blocks. A prompt that goes past
the point where its match ends gets a chain of its own, declared as a `Fork` of the matched
one, so the store knows the shared blocks are the same content; a prompt that ends exactly
where an idle chain ends extends that chain (an agent's next turn). A chain is never
extended by two running turns at once: a turn's generated blocks land after its prompt,
and two turns would claim the same positions.

Affinity keys (`user`, `X-Session-Id`) are accepted as routing hints only: content decides
the chain. Bounded: past `max_sessions` the least recently used idle chain is forgotten
(its hashes leave the index), so a later prompt with that content starts a fresh chain —
the cost is a cache miss, never an error. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from dualpath.model.blocks.chain import Fork
from dualpath.runtimes.process.frontdoor.tokenizer import pack

_ROOT = b"\x00" * 16
_ID_PERSON = b"dualpath/blk-id"  # block ids hash apart from token content


def block_hashes(token_ids: Sequence[int], block_tokens: int) -> list[bytes]:
    """Chained 16-byte hashes of the full blocks of `token_ids` (ids must fit in uint32)."""
    hashes: list[bytes] = []
    prev = _ROOT
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        block = pack(token_ids[start : start + block_tokens])
        prev = hashlib.blake2b(prev + block, digest_size=16).digest()
        hashes.append(prev)
    return hashes


def id_block_hashes(block_ids: Sequence[int], per_id: int) -> list[bytes]:
    """Chained hashes for a client's content ids (a trace's `hash_ids`): each id names
    `per_id` of the cluster's blocks (a 512-token trace block is eight 64-token blocks)."""
    hashes: list[bytes] = []
    prev = _ROOT
    for block_id in block_ids:
        for part in range(per_id):
            data = prev + block_id.to_bytes(8, "little", signed=True) + part.to_bytes(4, "little")
            prev = hashlib.blake2b(data, digest_size=16, person=_ID_PERSON).digest()
            hashes.append(prev)
    return hashes


@dataclass(frozen=True, slots=True)
class Placement:
    session: int  # the chain the prompt's blocks live on
    turn: int  # turns placed on this chain before this one
    matched_blocks: int  # leading blocks some earlier prompt already recorded
    lineage: tuple[Fork, ...]  # the chain's forks, root first (declared before use)


@dataclass(slots=True)
class _Chain:
    base: int  # positions [0, base) belong to the parent
    lineage: tuple[Fork, ...]
    own: list[bytes] = field(default_factory=list)  # hashes of positions base, base+1, ...
    turn: int = -1
    running: int = 0  # turns on this chain not yet released

    @property
    def end(self) -> int:
        return self.base + len(self.own)


class PrefixSessions:
    """Maps prompts' block hashes to chains; see the module docstring for the rules."""

    def __init__(self, block_tokens: int, max_sessions: int = 100_000, first_id: int = 1) -> None:
        if block_tokens < 1 or max_sessions < 1 or first_id < 0:
            raise ValueError("block_tokens and max_sessions must be >= 1, first_id >= 0")
        self.block_tokens = block_tokens
        self.max_sessions = max_sessions
        self._chains: OrderedDict[int, _Chain] = OrderedDict()  # LRU order, oldest first
        self._where: dict[bytes, tuple[int, int]] = {}  # block hash -> (chain, position)
        self._next_id = first_id

    def __len__(self) -> int:
        return len(self._chains)

    def resolve(self, affinity: str | None, token_ids: Sequence[int]) -> tuple[int, int]:
        """(chain, turn) of a token prompt; the caller must `release` the chain after the
        turn. Kept for callers that need no lineage (tests, tools)."""
        p = self.place(block_hashes(token_ids, self.block_tokens))
        return p.session, p.turn

    def place(self, hashes: Sequence[bytes]) -> Placement:
        """Put a prompt (its chained block hashes) on a chain and mark the chain running."""
        matched = self._matched(hashes)
        sid: int | None = None
        if matched:
            owner, _ = self._where[hashes[matched - 1]]
            chain = self._chains[owner]
            if chain.end == matched and chain.running == 0:
                sid = owner  # the next turn of the conversation that ends here
            else:
                sid = self._create(Fork(self._next_id, owner, matched), chain.lineage)
        if sid is None:
            sid = self._create(None, ())
        chain = self._chains[sid]
        for pos in range(chain.end, len(hashes)):
            chain.own.append(hashes[pos])
            self._where.setdefault(hashes[pos], (sid, pos))
        chain.turn += 1
        chain.running += 1
        self._chains.move_to_end(sid)
        self._evict()
        return Placement(sid, chain.turn, matched, chain.lineage)

    def release(self, session: int) -> None:
        """The turn placed on `session` ended (done or failed): the chain may be extended."""
        chain = self._chains.get(session)
        if chain is not None and chain.running > 0:
            chain.running -= 1

    def _matched(self, hashes: Sequence[bytes]) -> int:
        """Leading hashes already recorded. Chained hashes: once one is unknown every later
        one is too, so a binary search over positions finds the boundary."""
        lo, hi = 0, len(hashes)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hashes[mid - 1] in self._where:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _create(self, fork: Fork | None, parents: tuple[Fork, ...]) -> int:
        sid = self._next_id
        self._next_id += 1
        if fork is None:
            self._chains[sid] = _Chain(0, ())
        else:
            self._chains[sid] = _Chain(fork.at, (*parents, fork))
        return sid

    def _evict(self) -> None:
        idle = (s for s, c in self._chains.items() if c.running == 0)
        while len(self._chains) > self.max_sessions:
            victim = next(idle, None)
            if victim is None:
                return  # every chain has a turn running: over the bound until one ends
            chain = self._chains.pop(victim)
            for h in chain.own:
                if self._where.get(h, (None, 0))[0] == victim:
                    del self._where[h]
            idle = (s for s, c in self._chains.items() if c.running == 0)
