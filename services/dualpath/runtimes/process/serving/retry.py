"""Retrying idempotent gRPC calls: a peer that restarts (storage), or a call cut short by
a transient transport condition, gets a few tries with capped exponential backoff inside
the caller's deadline; anything else is the caller's failure to handle."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from tenacity import AsyncRetrying, retry_if_exception, stop_before_delay, wait_exponential

T = TypeVar("T")

TRANSIENT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN}
)
MAX_DELAY_S = 1.0  # the backoff doubles up to this


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() in TRANSIENT


async def idempotent(
    call: Callable[[float], Awaitable[T]], deadline_s: float, first_delay_s: float = 0.05
) -> T:
    """`call(timeout)` until it succeeds, fails for good, or `deadline_s` wall seconds pass.
    Only for calls that may safely run twice (lookups, reads of stored state).

    Each try gets what is left of the deadline as its timeout; no try starts after the
    deadline (a backoff that would end past it gives up at once, raising the last error)."""
    end = time.monotonic() + deadline_s

    async def once() -> T:
        return await call(max(0.001, end - time.monotonic()))

    retrying = AsyncRetrying(
        retry=retry_if_exception(_transient),
        wait=wait_exponential(multiplier=first_delay_s, max=MAX_DELAY_S),
        stop=stop_before_delay(deadline_s),
        reraise=True,
    )
    result: T = await retrying(once)  # (tenacity types an async call's result as Any)
    return result
