"""Block-store index in Redis: how many blocks of each session's prefix storage holds.

Storage writes it as blocks land and reads it back on start, so a restarted storage node
keeps serving the blocks it already had. Each session's value only ever grows: writes can
arrive out of order (several writers, retries), and a stale smaller write must never hide
blocks that are stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from dualpath.runtimes.process.control import keys
from dualpath.runtimes.process.control.common import raise_if_cancelling
from dualpath.runtimes.process.control.resilience import REDIS_ERRORS, Outage

# Raise each session's count to max(current, new) atomically, for any number of pairs.
# ARGV = session1, blocks1, session2, blocks2, ...; returns how many fields were raised.
_RAISE_LUA = """
local raised = 0
for i = 1, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    raised = raised + 1
  end
end
return raised
"""
_PAIRS_PER_CALL = 1000  # bounds how long one script call blocks the (single-threaded) server
_SCAN_COUNT = 1000
_MAX_VALUE = 2**53  # Lua compares numbers as doubles: exact only below 2**53


def _check(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_VALUE:
        raise ValueError(f"{field}={value!r} must be an int in [0, 2**53)")
    return value


class BlockIndex:
    """The index of one run. `record_many` and `record_forks` are write-behind: a write that
    fails (Redis unreachable) is kept and retried in the background with backoff instead of
    raising, so the store keeps serving through a Redis outage. After an outage everything
    this instance has recorded or loaded is written again (idempotent: values only grow),
    because a restarted Redis comes back empty. `pending` counts the entries not yet
    written; `close()` stops the retries."""

    def __init__(self, redis: Redis, run_id: str) -> None:
        self._r = redis
        self._key = keys.block_index_key(run_id)
        self._forks_key = keys.fork_index_key(run_id)
        self._raise = redis.register_script(_RAISE_LUA)
        self.outage = Outage(f"blockindex:{run_id}")
        self._known: dict[int, int] = {}  # every value recorded or loaded: what a resync writes
        self._pending: dict[int, int] = {}
        self._forks: dict[str, str] = {}
        self._pending_forks: dict[str, str] = {}
        self._resync_blocks = self._resync_forks = False
        self._retry: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._pending_forks)

    @property
    def behind(self) -> bool:
        """Something recorded is not yet in Redis (pending, or to write again after an
        outage): the storage acknowledges no write while this holds."""
        return bool(self.pending or self._resync_blocks or self._resync_forks)

    async def record(self, session: int, stored_blocks: int) -> bool:
        """Set the session's stored prefix length if larger; True if it was raised. Unlike
        `record_many`, raises on a Redis error."""
        args = [_check("session", session), _check("stored_blocks", stored_blocks)]
        raised = await self._raise(keys=[self._key], args=args)
        _merge(self._known, [(session, stored_blocks)])
        return bool(raised)

    async def record_many(self, items: Sequence[tuple[int, int]]) -> int:
        """`record` for many sessions in one round trip; returns how many were raised (0 if
        Redis failed: the items are then kept for a later write)."""
        checked = [(_check("session", s), _check("stored_blocks", b)) for s, b in items]
        _merge(self._known, checked)
        if self._resync_blocks:
            todo = list(self._known.items())
        else:
            todo = list(self._pending.items()) + checked
        if not todo:
            self._resync_blocks = False  # nothing known: nothing to write again
            return 0
        if not self.outage.due():
            _merge(self._pending, checked)
            return 0
        try:
            results = await self._raise_all(todo)
        except REDIS_ERRORS as e:
            _merge(self._pending, checked)
            self._failed(e)
            return 0
        self._pending.clear()
        self._resync_blocks = False
        self.outage.ok()
        return sum(int(n) for n in results)

    async def _raise_all(self, todo: list[tuple[int, int]]) -> list[int]:
        args = [v for pair in todo for v in pair]
        step = 2 * _PAIRS_PER_CALL
        async with self._r.pipeline(transaction=False) as pipe:
            for i in range(0, len(args), step):
                await self._raise(keys=[self._key], args=args[i : i + step], client=pipe)
            results: list[int] = await pipe.execute()
        return results

    async def record_forks(self, forks: Sequence[tuple[int, int, int]]) -> None:
        """Remember (session, parent, at) forks: a restarted store needs them to compute
        the digests of the blocks it reloads. A fork never changes, so HSET is enough.
        Write-behind like `record_many`."""
        mapping = {
            str(_check("session", s)): f"{_check('parent', p)}:{_check('at', a)}"
            for s, p, a in forks
        }
        self._forks.update(mapping)
        self._pending_forks.update(mapping)
        todo = self._forks if self._resync_forks else self._pending_forks
        if not todo:
            self._resync_forks = False
            return
        if not self.outage.due():
            return
        try:
            await self._r.hset(self._forks_key, mapping=todo)  # type: ignore[arg-type]
        except REDIS_ERRORS as e:
            self._failed(e)
            return
        self._pending_forks.clear()
        self._resync_forks = False
        self.outage.ok()

    def _failed(self, exc: BaseException) -> None:
        self.outage.failed(exc)
        self._resync_blocks = self._resync_forks = True
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._catch_up(), name="blockindex-retry")

    async def _catch_up(self) -> None:
        """Retry until everything is written, so it lands even if no new write comes."""
        while self.behind:
            await asyncio.sleep(max(0.0, self.outage.next_try - time.monotonic()))
            await self.record_forks([])  # forks first: a reloaded block needs its lineage
            await self.record_many([])
            raise_if_cancelling()

    async def close(self) -> None:
        task, self._retry = self._retry, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def load_forks(self) -> list[tuple[int, int, int]]:
        """Every recorded fork as (session, parent, at)."""
        out: list[tuple[int, int, int]] = []
        async for field, value in self._r.hscan_iter(self._forks_key, count=_SCAN_COUNT):
            parent, at = str(value if isinstance(value, str) else value.decode()).split(":")
            out.append((int(field), int(parent), int(at)))
            self._forks[str(int(field))] = f"{int(parent)}:{int(at)}"
        return out

    async def load(self) -> dict[int, int]:
        """The whole index: session -> stored prefix length."""
        out: dict[int, int] = {}
        async for field, value in self._r.hscan_iter(self._key, count=_SCAN_COUNT):
            out[int(field)] = int(value)
        _merge(self._known, list(out.items()))
        return out

    async def get(self, session: int) -> int:
        value = await self._r.hget(self._key, str(_check("session", session)))
        return 0 if value is None else int(value)

    async def clear(self) -> None:
        await self._r.delete(self._key, self._forks_key)
        for table in (self._known, self._pending, self._forks, self._pending_forks):
            table.clear()
        self._resync_blocks = self._resync_forks = False


def _merge(into: dict[int, int], items: Sequence[tuple[int, int]]) -> None:
    for session, blocks in items:
        if blocks > into.get(session, -1):
            into[session] = blocks
