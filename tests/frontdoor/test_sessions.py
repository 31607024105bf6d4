"""PrefixSessions: chained block hashes decide which KV chain a prompt extends."""

from __future__ import annotations

import pytest

from dualpath.frontdoor import NATIVE_SESSION_BASE, NativeSessions, PrefixSessions, block_hashes

A = [1, 2, 3, 4]
B = [5, 6, 7, 8]
C = [9, 10, 11, 12]


def test_hashes_are_chained_and_cover_full_blocks_only() -> None:
    ab = block_hashes(A + B + [99], 4)
    ba = block_hashes(B + A, 4)
    assert len(ab) == 2  # the partial tail [99] is not hashed
    assert ab[1] != ba[0]  # block B after A differs from block B first
    assert block_hashes(B, 4)[0] == ba[0]
    assert block_hashes(C + B, 4)[1] != ab[1]  # same block, different history
    assert block_hashes([1, 2, 3], 4) == []


def test_extension_reuses_the_session() -> None:
    s = PrefixSessions(4)
    assert s.resolve(None, A + B) == (1, 0)
    assert s.resolve(None, A + B + C + [1]) == (1, 1)
    assert s.resolve(None, A + B + C) == (1, 2)


def test_divergence_starts_a_new_session() -> None:
    s = PrefixSessions(4)
    assert s.resolve(None, A + B) == (1, 0)
    assert s.resolve(None, A + C) == (2, 0)  # shares block A only: a different chain
    assert s.resolve(None, A + B + C) == (1, 1)  # the longest matching history wins
    assert s.resolve(None, A + C + B) == (2, 1)
    assert s.resolve(None, [1, 2]) == (3, 0)  # no full block, no key: nothing to match


def test_affinity_keeps_a_conversation_and_repoints_on_divergence() -> None:
    s = PrefixSessions(4)
    assert s.resolve("u1", A) == (1, 0)
    assert s.resolve("u2", A) == (2, 0)  # a new key is a new conversation
    assert s.resolve("u1", A + B) == (1, 1)
    assert s.resolve("u1", [7]) == (1, 2)  # no full block yet: stays on its chain
    assert s.resolve("u1", A + B + C) == (1, 3)  # ... which kept its recorded blocks
    assert s.resolve("u1", C) == (3, 0)  # diverged: fresh chain, key re-pointed
    assert s.resolve("u1", C + A) == (3, 1)
    assert s.resolve(None, A + B + C + A) == (1, 4)  # the old chain is still findable


def test_lru_bound_forgets_the_oldest_session_and_its_key() -> None:
    s = PrefixSessions(4, max_sessions=2)
    assert s.resolve("k", A) == (1, 0)
    assert s.resolve(None, B) == (2, 0)
    assert s.resolve("k", A + B) == (1, 1)  # touches session 1: session 2 is now oldest
    assert s.resolve(None, C) == (3, 0)  # evicts session 2
    assert len(s) == 2
    assert s.resolve(None, B + C) == (4, 0)  # session 2's blocks are forgotten
    assert s.resolve("k", A + B + C) == (5, 0)  # session 1 was evicted with its key
    assert s.resolve("k", A + B + C + A) == (5, 1)


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        PrefixSessions(0)


def test_native_sessions_are_lru_bounded() -> None:
    table = NativeSessions(max_sessions=2)
    a = table.get("a").session
    table.get("b")
    assert table.get("a").session == a  # touch a: b is now the oldest
    table.get("c")
    assert table.get("b").session == NATIVE_SESSION_BASE + 3  # b was forgotten
