"""runtimes/process/serving/payload.py: real payload bytes, their checksum, chunks and size."""

from __future__ import annotations

import pytest

from dualpath.runtimes.process.serving import payload


def test_payload_checksum_catches_a_flipped_byte() -> None:
    p = payload.make(seed=7, size=1000)
    assert payload.verify(p, "t") == 1000
    bad = bytearray(p.data)
    bad[500] ^= 1
    p.data = bytes(bad)
    with pytest.raises(payload.PayloadError, match="checksum"):
        payload.verify(p, "t")


def test_payload_chunks_reassemble_and_size_is_scaled_and_capped() -> None:
    size = payload.CHUNK_BYTES * 2 + 10
    parts = list(payload.chunks(3, size))
    assert len(parts) == 3 and sum(len(c.data) for c in parts) == size
    assert b"".join(c.data for c in parts) == payload.make(3, size).data
    assert payload.payload_size(1e6, 1e-3) == 1000
    assert payload.payload_size(1e12, 1.0) == payload.MAX_PAYLOAD_BYTES
    assert payload.payload_size(1e6, 0) == 0
