"""tests/polling.py, the tests' only way to wait: it returns the condition's value as soon
as it holds, and a deadline that passes fails naming what was awaited."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.polling import wait_until, wait_until_async


def test_returns_the_first_truthy_value_without_waiting_longer() -> None:
    calls = itertools.count()
    started = time.monotonic()
    assert wait_until(lambda: next(calls) >= 3 and "ready", 5, 0.01, what="x") == "ready"
    assert time.monotonic() - started < 1.0


def test_a_passed_deadline_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waited 0\.1 s for the store to fill; last .*: 0"):
        wait_until(lambda: 0, 0.1, 0.02, what="the store to fill")


def test_the_async_variant_awaits_async_conditions_and_keeps_the_loop_running() -> None:
    async def main() -> list[str]:
        done: list[str] = []

        async def later() -> None:
            await asyncio.sleep(0.05)  # not a wait: the condition becomes true later
            done.append("x")

        task = asyncio.create_task(later())

        async def finished() -> list[str]:
            return done

        got = await wait_until_async(finished, 5, 0.01, what="the task")
        await task
        with pytest.raises(AssertionError, match=r"waited 0\.05 s for never"):
            await wait_until_async(lambda: False, 0.05, 0.01, what="never")
        return got

    assert asyncio.run(main()) == ["x"]
