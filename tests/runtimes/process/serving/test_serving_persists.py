"""runtimes/process/serving/persists.py: a decode node's unacknowledged persists are kept (one
range per
session), sent again until the storage acknowledges them, and dropped (counted) at their
deadline or on a refusal that will not pass."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from dualpath.model.blocks import BlockRange
from dualpath.runtimes.process.serving.persists import MAX_RANGES_PER_WRITE, Persists


def _error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "test")


class Storage:
    """Refuses the first `down` writes with `code`, then acknowledges."""

    def __init__(self, down: int, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.down, self.code = down, code
        self.acked: list[list[BlockRange]] = []
        self.tries = 0

    async def send(self, ranges: list[BlockRange], timeout: float) -> None:
        assert timeout > 0
        self.tries += 1
        if self.tries <= self.down:
            raise _error(self.code)
        self.acked.append(ranges)


async def _settle(p: Persists, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while p.kept:
            await asyncio.sleep(0.01)


def test_kept_ranges_merge_per_session_and_land_in_one_write_after_a_restart() -> None:
    async def run() -> tuple[Storage, Persists, list[str]]:
        storage, dropped = Storage(down=3), []
        p = Persists(storage.send, 30.0, lambda r, why: dropped.append(why), pytest.fail)
        p.keep([BlockRange(1, 0, 93), BlockRange(2, 0, 4)])
        p.keep([BlockRange(1, 93, 95)])  # a later flush of session 1 failed too
        assert len(p.kept) == 2  # one entry per session, however many writes failed
        await _settle(p)
        return storage, p, dropped

    storage, p, dropped = asyncio.run(run())
    assert storage.tries == 4 and dropped == [] and p.resent == 1
    assert storage.acked == [[BlockRange(1, 0, 95), BlockRange(2, 0, 4)]]


def test_a_range_is_dropped_at_its_deadline_and_counted() -> None:
    async def run() -> tuple[Persists, list[tuple[BlockRange, str]]]:
        storage, dropped = Storage(down=10**6), []
        p = Persists(storage.send, 0.3, lambda r, why: dropped.append((r, why)), pytest.fail)
        p.keep([BlockRange(7, 2, 9)])
        await _settle(p)
        return p, dropped

    p, dropped = asyncio.run(run())
    assert p.dropped == 1 and dropped == [(BlockRange(7, 2, 9), "deadline passed")]


def test_a_refusal_that_will_not_pass_drops_the_write_at_once() -> None:
    async def run() -> tuple[Storage, list[str]]:
        storage, dropped = Storage(down=1, code=grpc.StatusCode.DATA_LOSS), []
        p = Persists(storage.send, 30.0, lambda r, why: dropped.append(why), pytest.fail)
        p.keep([BlockRange(3, 0, 2)])
        await _settle(p)
        return storage, dropped

    storage, dropped = asyncio.run(run())
    assert storage.tries == 1 and len(dropped) == 1 and dropped[0].startswith("DATA_LOSS")


def test_one_write_carries_a_bounded_number_of_ranges() -> None:
    async def run() -> Storage:
        storage = Storage(down=1)
        p = Persists(storage.send, 30.0, lambda r, why: pytest.fail(why), pytest.fail)
        p.keep([BlockRange(s, 0, 1) for s in range(MAX_RANGES_PER_WRITE + 5)])
        await _settle(p)
        return storage

    storage = asyncio.run(run())
    assert [len(w) for w in storage.acked] == [MAX_RANGES_PER_WRITE, 5]
