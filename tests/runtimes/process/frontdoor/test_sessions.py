"""PrefixSessions: content (chained block hashes) decides which KV chain a prompt is on."""

from __future__ import annotations

import pytest

from dualpath.model.blocks.chain import Fork
from dualpath.runtimes.process.frontdoor import (
    NATIVE_SESSION_BASE,
    NativeSessions,
    PrefixSessions,
    block_hashes,
)
from dualpath.runtimes.process.frontdoor.sessions import id_block_hashes

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


def _placed(s: PrefixSessions, tokens: list[int]) -> tuple[int, int, int]:
    """Place a prompt and end its turn at once (as a finished request does)."""
    p = s.place(block_hashes(tokens, s.block_tokens))
    s.release(p.session)
    return p.session, p.turn, p.matched_blocks


def test_extension_reuses_the_chain() -> None:
    s = PrefixSessions(4)
    assert _placed(s, A + B) == (1, 0, 0)
    assert _placed(s, A + B + C + [1]) == (1, 1, 2)
    assert _placed(s, A + B + C) == (1, 2, 3)


def test_a_shared_prefix_forks_the_chain_that_holds_it() -> None:
    s = PrefixSessions(4)
    assert _placed(s, A + B) == (1, 0, 0)
    p = s.place(block_hashes(A + C, 4))  # shares block A, then differs: a fork at 1
    assert (p.session, p.turn, p.matched_blocks) == (2, 0, 1)
    assert p.lineage == (Fork(2, 1, 1),)
    s.release(2)
    assert _placed(s, A + B + C) == (1, 1, 2)  # the conversation that ends at B goes on
    assert _placed(s, A + C + B) == (2, 1, 2)
    grand = s.place(block_hashes(A + C + C, 4))  # forks chain 2 inside its own blocks
    assert grand.lineage == (Fork(2, 1, 1), Fork(3, 2, 2))
    assert _placed(s, [1, 2]) == (4, 0, 0)  # no full block: nothing to match


def test_a_running_chain_is_never_extended_twice() -> None:
    s = PrefixSessions(4)
    first = s.place(block_hashes(A + B, 4))  # still running
    same = s.place(block_hashes(A + B + C, 4))
    assert same.session != first.session and same.lineage == (Fork(2, 1, 2),)
    s.release(first.session)
    s.release(same.session)
    assert _placed(s, A + B + C + A) == (2, 1, 3)  # the longest match wins


def test_ids_and_tokens_hash_apart_and_ids_expand_to_cluster_blocks() -> None:
    by_ids = id_block_hashes([7, 8], 8)  # two 512-token trace blocks = 16 blocks of 64
    assert len(by_ids) == 16 and len(set(by_ids)) == 16
    assert id_block_hashes([7, 9], 8)[:8] == by_ids[:8]
    assert id_block_hashes([7, 9], 8)[8] != by_ids[8]
    assert not set(by_ids) & set(block_hashes(list(range(64)), 4))


def test_lru_bound_forgets_the_oldest_idle_chain() -> None:
    s = PrefixSessions(4, max_sessions=2)
    assert _placed(s, A) == (1, 0, 0)
    assert _placed(s, B) == (2, 0, 0)
    assert _placed(s, A + B) == (1, 1, 1)  # touches chain 1: chain 2 is now oldest
    assert _placed(s, C) == (3, 0, 0)  # evicts chain 2
    assert len(s) == 2
    assert _placed(s, B + C) == (4, 0, 0)  # chain 2's blocks are forgotten
    running = s.place(block_hashes(A, 4))
    assert _placed(s, C + C) == (6, 0, 0)  # evicts an idle chain, never the running one
    assert running.session in s._chains


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
