"""Paper-scale sanity: a million blocks persisted in decode-sized chunks, read back by range.

No timing asserts (CI hosts vary); the test exists so a per-block Python object or an
O(n) digest creeping in shows up as a suite that suddenly takes minutes.
"""

from __future__ import annotations

import numpy as np

from dualpath.model.blocks import BlockRange, BlockStore


def test_million_blocks_persist_and_read() -> None:
    store = BlockStore()
    sessions, per_session, chunk = 1000, 1000, 8
    for s in range(sessions):
        for start in range(0, per_session, chunk):
            rng = BlockRange(s, start, start + chunk)
            store.persist(rng, store.chains.expected_digest(rng))
    assert store.blocks_persisted == store.stored_blocks == sessions * per_session
    rs = np.random.default_rng(0)
    for _ in range(20_000):  # ~10^7 block reads: each range digest is O(1)
        s = int(rs.integers(sessions))
        stop = int(rs.integers(1, per_session + 1))
        store.read_verified(BlockRange(s, 0, stop))
    assert store.blocks_read > 5_000_000
