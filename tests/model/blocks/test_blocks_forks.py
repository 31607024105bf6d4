"""Content addressing: forked chains share their parents' leading blocks in the store."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.blocks import BlockCorrupted, BlockGap, BlockMissing, BlockRange, BlockStore
from dualpath.model.blocks.chain import ChainRegistry, Fork


def _write(store: BlockStore, session: int, start: int, stop: int) -> int:
    rng = BlockRange(session, start, stop)
    return store.persist(rng, store.chains.expected_digest(rng))


def test_a_fork_shares_the_parents_hashes_and_digests_below_the_fork_point() -> None:
    reg = ChainRegistry(salt=3)
    reg.declare(Fork(session=2, parent=1, at=10))
    assert np.array_equal(reg.hashes(BlockRange(2, 0, 10)), reg.hashes(BlockRange(1, 0, 10)))
    assert reg.block_hash(2, 10) != reg.block_hash(1, 10)  # own content from the fork on
    whole = reg.expected_digest(BlockRange(2, 3, 25))
    parts = reg.expected_digest(BlockRange(1, 3, 10)) + reg.expected_digest(BlockRange(2, 10, 25))
    assert whole == parts & ((1 << 64) - 1)
    assert int(reg.expected_checksums(BlockRange(2, 3, 25)).sum(dtype=np.uint64)) == whole


def test_declarations_are_checked() -> None:
    reg = ChainRegistry()
    reg.declare(Fork(2, 1, 4))
    reg.declare(Fork(2, 1, 4))  # idempotent
    with pytest.raises(ValueError, match="already forks"):
        reg.declare(Fork(2, 1, 5))
    with pytest.raises(ValueError, match="cycle"):
        reg.declare(Fork(1, 2, 2))
    reg.chain(7)
    with pytest.raises(ValueError, match="in use"):
        reg.declare(Fork(7, 1, 2))
    with pytest.raises(ValueError, match="at >= 1"):
        reg.declare(Fork(8, 1, 0))
    reg.declare(Fork(3, 2, 6))
    assert reg.lineage(3) == [Fork(2, 1, 4), Fork(3, 2, 6)]
    assert reg.owner_ranges(BlockRange(3, 0, 9)) == [
        BlockRange(1, 0, 4),
        BlockRange(2, 4, 6),
        BlockRange(3, 6, 9),
    ]


def test_blocks_written_through_one_session_hit_for_its_forks() -> None:
    store = BlockStore()
    store.chains.declare(Fork(2, 1, 10))
    store.chains.declare(Fork(3, 1, 4))
    assert _write(store, 2, 0, 12) == 12  # 10 shared blocks land in chain 1, 2 in chain 2
    assert store.prefix_blocks(1) == 10
    assert store.prefix_blocks(2) == 12
    assert store.prefix_blocks(3) == 4  # the shared 4, then nothing of its own
    assert _write(store, 1, 0, 10) == 0  # the same content again: nothing new
    assert store.stored_blocks == 12 and store.stored_runs() == {1: 10, 2: 12}
    assert store.read_verified(BlockRange(3, 0, 4)) == store.chains.expected_digest(
        BlockRange(1, 0, 4)
    )
    with pytest.raises(BlockMissing):
        store.read_digest(BlockRange(3, 0, 5))


def test_own_blocks_are_no_hit_until_the_shared_prefix_is_stored() -> None:
    store = BlockStore()
    store.chains.declare(Fork(2, 1, 5))
    assert _write(store, 2, 5, 8) == 3  # its own blocks, from the fork point
    assert store.prefix_blocks(2) == 0  # chained: the shared prefix is missing
    with pytest.raises(BlockGap):
        _write(store, 1, 2, 5)  # strict persist refuses a gap in the owner's run
    assert _write(store, 1, 0, 5) == 5
    assert store.prefix_blocks(2) == 8


def test_out_of_order_parts_park_per_owner() -> None:
    store = BlockStore()
    store.chains.declare(Fork(2, 1, 4))
    rng = BlockRange(2, 2, 9)  # 2 blocks of chain 1 past its (empty) run, 5 of chain 2
    assert store.persist_any_order(rng, store.chains.expected_digest(rng)) == 5
    assert store.parked_blocks() == 2 and store.prefix_blocks(2) == 0
    first = BlockRange(1, 0, 2)
    assert store.persist_any_order(first, store.chains.expected_digest(first)) == 4
    assert store.parked_blocks() == 0 and store.prefix_blocks(2) == 9


def test_damage_in_a_shared_block_fails_every_session_reading_it() -> None:
    store = BlockStore()
    store.chains.declare(Fork(2, 1, 6))
    _write(store, 1, 0, 6)
    _write(store, 2, 6, 8)
    store.corrupt(2, 3)  # block 3 of session 2 is block 3 of chain 1
    assert store.corrupted == frozenset({(1, 3)})
    for session in (1, 2):
        rng = BlockRange(session, 0, 6)
        with pytest.raises(BlockCorrupted, match="block 3"):
            store.verify(rng, store.read_digest(rng))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 12)), min_size=1, max_size=6))
def test_forks_agree_with_a_per_block_content_model(forks: list[tuple[int, int]]) -> None:
    """Session k+1 forks session `p % (k+1)` at `at`; every block's identity is the tuple of
    (owner, index) it resolves to, and equal identities always give equal hashes."""
    reg = ChainRegistry()
    for k, (p, at) in enumerate(forks):
        reg.declare(Fork(k + 1, p % (k + 1), at))
    n = len(forks) + 1
    for s in range(n):
        for t in range(n):
            for i in range(14):
                (a,) = reg.owner_ranges(BlockRange(s, i, i + 1))
                (b,) = reg.owner_ranges(BlockRange(t, i, i + 1))
                assert (reg.block_hash(s, i) == reg.block_hash(t, i)) == (a == b)
