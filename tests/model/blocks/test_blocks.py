"""KV blocks: sizes, chain hashes, range digests, the store's persist/read/verify contract."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.blocks import (
    MASK64,
    BlockCorrupted,
    BlockGap,
    BlockMissing,
    BlockRange,
    BlockStore,
    ChainRegistry,
    full_block_bytes,
    full_blocks,
    layer_block_bytes,
)
from dualpath.model.blocks.chain import LOOKAHEAD


def _persisted(store: BlockStore, session: int, n: int) -> None:
    rng = BlockRange(session, 0, n)
    assert store.persist(rng, store.chains.expected_digest(rng)) == n


# --- sizes and ranges ----------------------------------------------------------------------
def test_layer_blocks_concatenate_to_a_full_block() -> None:
    kv, layers = 656, 61  # DS-V3.2-like: 656 B per token per layer, 61 layers
    assert layer_block_bytes(kv) == kv * 64
    assert full_block_bytes(kv, layers) == layers * layer_block_bytes(kv)
    assert full_block_bytes(kv, layers, block_tokens=128) == layers * layer_block_bytes(kv, 128)


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (-5, 3)])
def test_sizes_reject_non_positive(args: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        full_block_bytes(*args)


def test_full_blocks_counts_only_complete_blocks() -> None:
    assert [full_blocks(t) for t in (0, 63, 64, 127, 128)] == [0, 0, 1, 1, 2]


def test_block_range_basics() -> None:
    r = BlockRange(3, 4, 10)
    assert len(r) == r.nblocks == 6
    assert r.tokens() == 384
    assert str(r) == "session 3 blocks [4, 10)"
    with pytest.raises(ValueError):
        BlockRange(0, 5, 4)
    with pytest.raises(ValueError):
        BlockRange(-1, 0, 1)
    with pytest.raises(AttributeError):
        r.start = 0  # type: ignore[misc]


# --- chain ---------------------------------------------------------------------------------
def test_chain_hashes_differ_across_sessions_positions_and_salts() -> None:
    a, b = ChainRegistry(), ChainRegistry(salt=1)
    hs = {a.block_hash(s, i) for s in range(20) for i in range(50)}
    assert len(hs) == 1000
    assert a.block_hash(0, 0) != b.block_hash(0, 0)
    assert ChainRegistry().block_hash(7, 9) == a.block_hash(7, 9)  # deterministic


def test_chain_is_incremental_and_order_independent() -> None:
    one, two = ChainRegistry(), ChainRegistry()
    for n in (1, 5, 17, 100):  # grow in steps ...
        one.chain(2).ensure(n)
    whole = two.hashes(BlockRange(2, 0, 100))  # ... or at once
    assert np.array_equal(one.hashes(BlockRange(2, 0, 100)), whole)
    assert len(one.chain(2)) == 100


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=1, max_size=12))
def test_chain_grown_in_small_steps_reads_ahead_but_agrees(steps: list[int]) -> None:
    """Decode's one-block steps make the chain compute ahead (LOOKAHEAD); what any reader
    sees is what a chain computed in one go holds, and it never runs far ahead."""
    grown_, whole = ChainRegistry(), ChainRegistry()
    n = 0
    for step in steps:
        n += step
        grown_.chain(5).ensure(n)
        assert n <= len(grown_.chain(5)) <= n + LOOKAHEAD
        rng = BlockRange(5, max(0, n - step - 3), n)
        assert grown_.expected_digest(rng) == whole.expected_digest(rng)
    assert np.array_equal(grown_.hashes(BlockRange(5, 0, n)), whole.hashes(BlockRange(5, 0, n)))


def _by_definition(session: int, salt: int, n: int) -> tuple[list[int], list[int]]:
    """h_i and c_i from the module docstring's definition, one blake2b per block."""
    prev, hashes, sums = bytes(8), [], []
    for i in range(n):
        d = hashlib.blake2b(
            prev + session.to_bytes(8, "little") + i.to_bytes(8, "little"),
            digest_size=16,
            person=b"dualpath/kv-blk",
            salt=salt.to_bytes(16, "little"),
        ).digest()
        prev = d[:8]
        hashes.append(int.from_bytes(d[:8], "little"))
        sums.append(int.from_bytes(d[8:], "little"))
    return hashes, sums


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 90), min_size=1, max_size=8), st.integers(0, 2**63))
def test_chain_values_match_the_definition(steps: list[int], salt: int) -> None:
    """Hashes, checksums and digests as defined, however the chain was grown (the running
    sums wrap mod 2^64: random 64-bit checksums overflow within a few blocks)."""
    reg, n = ChainRegistry(salt=salt), 0
    for step in steps:
        n += step
        reg.chain(5).ensure(n)
    hashes, sums = _by_definition(5, salt, n)
    chain = reg.chain(5)
    assert [int(h) for h in chain.hashes(0, n)] == hashes
    assert [int(c) for c in chain.checksums(0, n)] == sums
    for a, b in ((0, n), (n // 3, n), (1, max(1, n - 1))):
        assert chain.digest(a, b) == sum(sums[a:b]) & MASK64


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.integers(0, 1000))
def test_range_digest_is_sum_of_block_checksums(i: int, j: int, session: int) -> None:
    reg = ChainRegistry()
    rng = BlockRange(session, min(i, j), max(i, j))
    per_block = sum(
        reg.expected_digest(BlockRange(session, k, k + 1)) for k in range(rng.start, rng.stop)
    )
    assert reg.expected_digest(rng) == per_block & MASK64
    assert reg.expected_digest(rng) == int(reg.expected_checksums(rng).sum(dtype=np.uint64))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80), st.integers(0, 80)), max_size=30))
def test_repeated_digests_agree_with_fresh_chains(asks: list[tuple[int, int, int]]) -> None:
    """A registry remembers the last chain and each chain its last digest: asked again,
    in any interleaving of sessions and ranges, they answer what a fresh registry does."""
    reg = ChainRegistry(salt=7)
    for session, i, j in asks:
        rng = BlockRange(session, min(i, j), max(i, j))
        for _ in range(2):
            assert reg.expected_digest(rng) == ChainRegistry(salt=7).expected_digest(rng)


def test_targets_stripe_by_hash() -> None:
    reg = ChainRegistry()
    rng = BlockRange(1, 0, 4000)
    t = reg.targets(rng, 16)
    assert reg.target_of(1, 123, 16) == t[123]
    counts = np.bincount(t, minlength=16)
    assert counts.min() > 4000 / 16 * 0.7  # roughly uniform
    with pytest.raises(ValueError):
        reg.target_of(1, 0, 0)


# --- store ---------------------------------------------------------------------------------
def test_persist_read_round_trip_and_counters() -> None:
    store = BlockStore()
    _persisted(store, 5, 10)
    rng = BlockRange(5, 2, 9)
    digest = store.read_digest(rng)
    assert digest == store.chains.expected_digest(rng)
    store.verify(rng, digest)
    assert store.read_verified(BlockRange(5, 0, 10)) == store.chains.expected_digest(
        BlockRange(5, 0, 10)
    )
    assert store.blocks_persisted == 10 and store.blocks_read == 7 + 10
    assert store.bytes_persisted(1000) == 10_000 and store.bytes_read(2) == 34
    assert store.sessions == 1 and store.stored_blocks == 10


def test_prefix_hits_come_only_from_persisted_blocks() -> None:
    store = BlockStore()
    assert store.prefix_blocks(1) == 0
    _persisted(store, 1, 3)
    rng = BlockRange(1, 2, 8)  # overlaps the stored run: only 5 blocks are new
    assert store.persist(rng, store.chains.expected_digest(rng)) == 5
    assert store.persist(rng, store.chains.expected_digest(rng)) == 0  # idempotent
    assert store.prefix_blocks(1) == 8
    assert store.prefix_blocks(2) == 0
    assert store.blocks_persisted == 8


def test_persist_beyond_a_gap_raises_and_stores_nothing() -> None:
    store = BlockStore()
    _persisted(store, 0, 4)
    rng = BlockRange(0, 5, 7)
    with pytest.raises(BlockGap, match=r"session 0 blocks \[5, 7\).*\[0, 4\)"):
        store.persist(rng, store.chains.expected_digest(rng))
    assert store.prefix_blocks(0) == 4


def test_wrong_producer_digest_is_rejected_on_write() -> None:
    store = BlockStore()
    rng = BlockRange(9, 0, 3)
    with pytest.raises(BlockCorrupted, match="persisted digest") as ei:
        store.persist(rng, store.chains.expected_digest(rng) ^ 1)
    assert ei.value.rng == rng and ei.value.block is None
    assert store.prefix_blocks(9) == 0


def test_reading_absent_blocks_raises_missing() -> None:
    store = BlockStore()
    with pytest.raises(BlockMissing, match="block 0 is not stored"):
        store.read_digest(BlockRange(4, 0, 1))
    _persisted(store, 4, 6)
    with pytest.raises(BlockMissing, match=r"session 4 blocks \[2, 9\): block 6") as ei:
        store.read_digest(BlockRange(4, 2, 9))
    assert ei.value.first_missing == 6
    assert store.blocks_read == 0


def test_corruption_is_detected_and_names_the_block() -> None:
    store = BlockStore()
    _persisted(store, 3, 20)
    store.corrupt(3, 11)
    assert store.corrupted == {(3, 11)}
    store.read_verified(BlockRange(3, 0, 11))  # blocks before the damage still verify
    store.read_verified(BlockRange(3, 12, 20))  # ... and after it
    bad = BlockRange(3, 5, 15)
    with pytest.raises(BlockCorrupted, match=r"session 3 blocks \[5, 15\).*first bad block 11"):
        store.read_verified(bad)
    with pytest.raises(BlockMissing):
        store.corrupt(3, 20)


def test_digest_damaged_in_flight_is_reported_as_such() -> None:
    store = BlockStore()
    _persisted(store, 0, 8)
    rng = BlockRange(0, 0, 8)
    with pytest.raises(BlockCorrupted, match="stored blocks intact") as ei:
        store.verify(rng, store.read_digest(rng) + 1)
    assert ei.value.block is None


def test_errors_pickle() -> None:
    err = BlockCorrupted(BlockRange(1, 2, 3), 5, 6, 2, "read")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.block == 2
    miss = pickle.loads(pickle.dumps(BlockMissing(BlockRange(1, 0, 3), 1)))
    assert miss.first_missing == 1


def test_lookup_prefix_by_chain_hash() -> None:
    store = BlockStore()
    _persisted(store, 42, 10)
    hashes = [int(h) for h in store.chains.hashes(BlockRange(42, 0, 15))]
    assert store.lookup_prefix(hashes) == 10
    assert store.lookup_prefix(hashes[:4]) == 4
    assert store.lookup_prefix([*hashes[:6], 123, *hashes[7:]]) == 6
    assert store.lookup_prefix(hashes[1:]) == 0  # not a root hash
    assert store.lookup_prefix([]) == 0


def test_store_shares_the_engines_chain_registry() -> None:
    reg = ChainRegistry(salt=7)
    store = BlockStore(reg)
    rng = BlockRange(0, 0, 2)
    assert store.persist(rng, reg.expected_digest(rng)) == 2
    with pytest.raises(BlockCorrupted):  # a registry with another salt disagrees
        BlockStore().persist(rng, reg.expected_digest(rng))


def test_out_of_order_writes_park_until_the_gap_fills() -> None:
    store = BlockStore(ChainRegistry(salt=3))
    digest = store.chains.expected_digest
    late = BlockRange(0, 4, 6)
    assert store.persist_any_order(late, digest(late)) == 0  # overtook [0, 4): parked
    assert store.prefix_blocks(0) == 0 and store.parked_blocks() == 2
    assert store.received(late) and not store.received(BlockRange(0, 0, 6))
    assert store.persist_any_order(late, digest(late)) == 0  # sent again: parked once
    assert store.parked_blocks() == 2
    early = BlockRange(0, 0, 4)
    assert store.persist_any_order(early, digest(early)) == 6  # the gap fills: both land
    assert store.prefix_blocks(0) == 6 and store.parked_blocks() == 0
    assert store.received(BlockRange(0, 0, 6)) and not store.received(BlockRange(0, 5, 7))
    store.read_verified(BlockRange(0, 0, 6))


def test_a_parked_write_is_still_checked_against_the_chain() -> None:
    store = BlockStore(ChainRegistry(salt=3))
    late = BlockRange(1, 2, 3)
    with pytest.raises(BlockCorrupted):
        store.persist_any_order(late, store.chains.expected_digest(late) ^ 1)
    assert store.parked_blocks() == 0
