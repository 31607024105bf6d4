"""Helpers shared by the registry and the event log.

msgpack ships no type information, so the one untyped import lives here behind typed
functions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack  # type: ignore[import-untyped]
from redis.asyncio import Redis


def pack(obj: object) -> bytes:
    data = msgpack.packb(obj, use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


def require_bytes_client(redis: Redis) -> Redis:
    """Reject clients that decode replies: our values are msgpack bytes, not UTF-8 text."""
    if redis.connection_pool.connection_kwargs.get("decode_responses"):
        raise ValueError(
            "redis client has decode_responses=True: create it with decode_responses=False "
            "(the default), the control plane stores binary msgpack values"
        )
    return redis


def raise_if_cancelling() -> None:
    """Call once per iteration of any loop that awaits Redis.

    On Python 3.11, `asyncio.wait_for` (which redis-py wraps around every socket write when
    a socket timeout is set) drops a cancellation that lands just as the write completes,
    so the command returns normally and a loop would run on forever. The task still counts
    the pending cancel request, so we honour it here. (Python 3.12+ fixed wait_for.)
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
