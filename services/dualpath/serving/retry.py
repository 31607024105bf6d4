"""Retrying idempotent gRPC calls: a peer that restarts (storage), or a call cut short by
a transient transport condition, gets a few tries with capped exponential backoff inside
the caller's deadline; anything else is the caller's failure to handle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

T = TypeVar("T")

TRANSIENT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN}
)


async def idempotent(
    call: Callable[[float], Awaitable[T]], deadline_s: float, first_delay_s: float = 0.05
) -> T:
    """`call(timeout)` until it succeeds, fails for good, or `deadline_s` wall seconds pass.
    Only for calls that may safely run twice (lookups, reads of stored state)."""
    end = time.monotonic() + deadline_s
    delay = first_delay_s
    while True:
        left = end - time.monotonic()
        try:
            return await call(max(0.001, left))
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in TRANSIENT or time.monotonic() + delay >= end:
                raise
        await asyncio.sleep(delay)
        delay = min(1.0, delay * 2)
