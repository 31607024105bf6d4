"""Waiting in tests: poll a condition until a deadline, never sleep a fixed time.

A fixed sleep is both slow (it waits its whole length when the condition held at once) and
flaky (a loaded machine needs longer). `wait_until` returns as soon as the condition holds
and fails naming what it waited for when the deadline passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _timed_out(what: str, timeout: float, last: object) -> AssertionError:
    return AssertionError(f"waited {timeout:g} s for {what}; last value: {last!r}")


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.05, *, what: str
) -> T:
    """Call `predicate()` every `interval` s until it returns a truthy value (returned) or
    `timeout` s pass (AssertionError naming `what` and the last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, value)
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float,
    interval: float = 0.05,
    *,
    what: str,
) -> T:
    """`wait_until` inside an event loop: `predicate` may be a plain or an async function;
    the loop keeps running between the polls."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        value: T = await got if inspect.isawaitable(got) else got
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, value)
        await asyncio.sleep(interval)
