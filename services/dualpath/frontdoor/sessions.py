"""Which KV chain (internal session) a prompt extends, from chained block hashes.

Block i's hash covers every token up to the end of block i (h_i = blake2b(h_{i-1} ||
tokens of block i)), so equal hashes mean equal prefixes, not just equal blocks. Only full
blocks are hashed: a partial tail cannot be reused from the KV store anyway.

The table only picks the chain; how many tokens really hit is the backend's business.
Bounded: past `max_sessions` the least recently resolved session is forgotten (with its
affinity key), so its next turn starts a fresh chain — the cost is a cache miss, never an
error. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from dualpath.frontdoor.tokenizer import pack

_ROOT = b"\x00" * 16


def block_hashes(token_ids: Sequence[int], block_tokens: int) -> list[bytes]:
    """Chained 16-byte hashes of the full blocks of `token_ids` (ids must fit in uint32)."""
    hashes: list[bytes] = []
    prev = _ROOT
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        block = pack(token_ids[start : start + block_tokens])
        prev = hashlib.blake2b(prev + block, digest_size=16).digest()
        hashes.append(prev)
    return hashes


@dataclass(slots=True)
class _Session:
    hashes: list[bytes] = field(default_factory=list)
    turn: int = 0
    key: str | None = None  # the affinity key pointing here (a key is bound at creation)


class PrefixSessions:
    """Maps prompts (and optional affinity keys) to (internal session id, turn index).

    - With an affinity key whose session's recorded blocks are a prefix of the prompt (or
      the prompt has no full block yet): that session, next turn.
    - With an unknown key: a new session bound to the key (a key names one conversation;
      we do not guess it from other conversations' prefixes).
    - Without a key: among the sessions sharing the prompt's first block hash, the one with
      the longest recorded prefix of the prompt; none (or no full block) → a new session.
    - A prompt that diverges from its key's session gets a new session and the key moves.
    """

    def __init__(self, block_tokens: int, max_sessions: int = 100_000) -> None:
        if block_tokens < 1 or max_sessions < 1:
            raise ValueError("block_tokens and max_sessions must be >= 1")
        self.block_tokens = block_tokens
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, _Session] = OrderedDict()  # LRU order, oldest first
        self._by_first: dict[bytes, set[int]] = {}
        self._by_key: dict[str, int] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._sessions)

    def resolve(self, affinity: str | None, token_ids: Sequence[int]) -> tuple[int, int]:
        hashes = block_hashes(token_ids, self.block_tokens)
        sid = self._find(affinity, hashes)
        if sid is None:
            sid = self._create(affinity)
            turn = 0
        else:
            session = self._sessions[sid]
            session.turn += 1
            turn = session.turn
        self._record(sid, hashes)
        self._sessions.move_to_end(sid)
        self._evict()
        return sid, turn

    def _find(self, affinity: str | None, hashes: list[bytes]) -> int | None:
        if affinity is not None:
            sid = self._by_key.get(affinity)
            if sid is not None and (not hashes or _is_prefix(self._sessions[sid].hashes, hashes)):
                return sid
            return None
        if not hashes:
            return None
        best: int | None = None
        best_len = -1
        for sid in self._by_first.get(hashes[0], ()):
            recorded = self._sessions[sid].hashes
            if len(recorded) > best_len and _is_prefix(recorded, hashes):
                best, best_len = sid, len(recorded)
        return best

    def _create(self, affinity: str | None) -> int:
        sid = self._next_id
        self._next_id += 1
        self._sessions[sid] = _Session(key=affinity)
        if affinity is not None:
            old = self._by_key.get(affinity)
            if old is not None:
                self._sessions[old].key = None  # the key moves to the fresh chain
            self._by_key[affinity] = sid
        return sid

    def _record(self, sid: int, hashes: list[bytes]) -> None:
        session = self._sessions[sid]
        # A prompt without a full block keeps the session's history: nothing to forget.
        if len(hashes) < len(session.hashes):
            return
        if not session.hashes and hashes:
            self._by_first.setdefault(hashes[0], set()).add(sid)
        session.hashes = hashes

    def _evict(self) -> None:
        while len(self._sessions) > self.max_sessions:
            sid, session = self._sessions.popitem(last=False)
            if session.hashes:
                peers = self._by_first[session.hashes[0]]
                peers.discard(sid)
                if not peers:
                    del self._by_first[session.hashes[0]]
            if session.key is not None:
                del self._by_key[session.key]


def _is_prefix(recorded: list[bytes], hashes: list[bytes]) -> bool:
    # Chained hashes: the last recorded block equal means the whole prefix is equal.
    n = len(recorded)
    return n <= len(hashes) and (n == 0 or recorded[n - 1] == hashes[n - 1])
