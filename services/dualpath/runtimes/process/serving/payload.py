"""Real-payload mode: scaled-down bytes that stand for emulated KV, with checksums.

`--real-payload SCALE` ships SCALE x the emulated bytes of every cross-process transfer.
The bytes are derived from a seed (the blocks' digest or the transfer's identity), so the
receiver can check both the checksum (transport integrity) and the length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from dualpath.rpc.v1 import kv_pb2

CHUNK_BYTES = 1 << 20  # well under gRPC's 4 MiB default message limit
MAX_PAYLOAD_BYTES = 64 << 20  # one transfer never ships more than this, whatever SCALE is


class PayloadError(ValueError):
    """A payload failed its checksum or length check at the consumer."""


def checksum(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def payload_size(nbytes: float, scale: float) -> int:
    return min(MAX_PAYLOAD_BYTES, int(nbytes * scale)) if scale > 0 else 0


def make(seed: int, size: int) -> kv_pb2.Payload:
    if size <= 0:
        return kv_pb2.Payload()
    data = hashlib.shake_128(seed.to_bytes(8, "little", signed=False)).digest(size)
    return kv_pb2.Payload(data=data, checksum=checksum(data))


def chunks(seed: int, size: int) -> Iterator[kv_pb2.Payload]:
    """`make(seed, size)` cut into stream-sized pieces, each with its own checksum."""
    if size <= 0:
        return
    data = make(seed, size).data
    for i in range(0, size, CHUNK_BYTES):
        piece = data[i : i + CHUNK_BYTES]
        yield kv_pb2.Payload(data=piece, checksum=checksum(piece))


def verify(p: kv_pb2.Payload, what: str) -> int:
    """Check one payload's checksum; returns its length."""
    if p.data and checksum(p.data) != p.checksum:
        raise PayloadError(f"{what}: payload checksum mismatch ({len(p.data)} bytes)")
    return len(p.data)
