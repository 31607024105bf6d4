"""runtimes/process/serving/retry.py: an idempotent call is tried again on a transient status
within its
deadline, and fails at once on any other."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest

from dualpath.runtimes.process.serving.retry import idempotent


def _error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "test")


def _call(
    failures: list[grpc.StatusCode], timeouts: list[float]
) -> Callable[[float], Awaitable[str]]:
    async def call(timeout: float) -> str:
        timeouts.append(timeout)
        if failures:
            raise _error(failures.pop(0))
        return "ok"

    return call


def test_transient_statuses_are_tried_again_until_the_call_succeeds() -> None:
    timeouts: list[float] = []
    transient = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN]
    call = _call(list(transient), timeouts)
    assert asyncio.run(idempotent(call, deadline_s=5.0, first_delay_s=0.01)) == "ok"
    assert len(timeouts) == 4
    assert all(0 < t <= 5.0 for t in timeouts) and timeouts == sorted(timeouts, reverse=True)


def test_any_other_status_fails_at_once() -> None:
    timeouts: list[float] = []
    call = _call([grpc.StatusCode.NOT_FOUND], timeouts)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(idempotent(call, deadline_s=5.0))
    assert info.value.code() is grpc.StatusCode.NOT_FOUND and len(timeouts) == 1


def test_a_peer_that_stays_down_fails_within_the_deadline() -> None:
    timeouts: list[float] = []
    call = _call([grpc.StatusCode.UNAVAILABLE] * 100, timeouts)
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(idempotent(call, deadline_s=0.5, first_delay_s=0.05))
    took = time.monotonic() - started
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert 3 <= len(timeouts) < 10 and took < 1.0  # backoff 0.05, 0.1, 0.2: not a spin


def test_the_backoff_doubles_and_no_try_starts_past_the_deadline() -> None:
    starts: list[float] = []

    async def call(timeout: float) -> str:
        starts.append(time.monotonic())
        raise _error(grpc.StatusCode.UNAVAILABLE)

    deadline_s, first = 1.0, 0.05
    began = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError):
        asyncio.run(idempotent(call, deadline_s=deadline_s, first_delay_s=first))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) >= 3, gaps
    # the waits follow first_delay_s x 2^i (a loaded host only makes them longer)
    assert all(gap >= first * 2**i * 0.9 for i, gap in enumerate(gaps)), gaps
    # the give-up comes before the backoff that would cross the deadline, not after it
    assert starts[-1] - began < deadline_s
