"""Block-store index in Redis: how many blocks of each session's prefix storage holds.

Storage writes it as blocks land and reads it back on start, so a restarted storage node
keeps serving the blocks it already had. Each session's value only ever grows: writes can
arrive out of order (several writers, retries), and a stale smaller write must never hide
blocks that are stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from dualpath.control import keys

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
    def __init__(self, redis: Redis, run_id: str) -> None:
        self._r = redis
        self._key = keys.block_index_key(run_id)
        self._forks_key = keys.fork_index_key(run_id)
        self._raise = redis.register_script(_RAISE_LUA)

    async def record(self, session: int, stored_blocks: int) -> bool:
        """Set the session's stored prefix length if larger; True if it was raised."""
        args = [_check("session", session), _check("stored_blocks", stored_blocks)]
        raised = await self._raise(keys=[self._key], args=args)
        return bool(raised)

    async def record_many(self, items: Sequence[tuple[int, int]]) -> int:
        """`record` for many sessions in one round trip; returns how many were raised."""
        args: list[int] = []
        for session, blocks in items:
            args += [_check("session", session), _check("stored_blocks", blocks)]
        if not args:
            return 0
        step = 2 * _PAIRS_PER_CALL
        async with self._r.pipeline(transaction=False) as pipe:
            for i in range(0, len(args), step):
                await self._raise(keys=[self._key], args=args[i : i + step], client=pipe)
            results = await pipe.execute()
        return sum(int(n) for n in results)

    async def record_forks(self, forks: Sequence[tuple[int, int, int]]) -> None:
        """Remember (session, parent, at) forks: a restarted store needs them to compute
        the digests of the blocks it reloads. A fork never changes, so HSET is enough."""
        if forks:
            mapping = {
                str(_check("session", s)): f"{_check('parent', p)}:{_check('at', a)}"
                for s, p, a in forks
            }
            await self._r.hset(self._forks_key, mapping=mapping)  # type: ignore[arg-type]

    async def load_forks(self) -> list[tuple[int, int, int]]:
        """Every recorded fork as (session, parent, at)."""
        out: list[tuple[int, int, int]] = []
        async for field, value in self._r.hscan_iter(self._forks_key, count=_SCAN_COUNT):
            parent, at = str(value if isinstance(value, str) else value.decode()).split(":")
            out.append((int(field), int(parent), int(at)))
        return out

    async def load(self) -> dict[int, int]:
        """The whole index: session -> stored prefix length."""
        out: dict[int, int] = {}
        async for field, value in self._r.hscan_iter(self._key, count=_SCAN_COUNT):
            out[int(field)] = int(value)
        return out

    async def get(self, session: int) -> int:
        value = await self._r.hget(self._key, str(_check("session", session)))
        return 0 if value is None else int(value)

    async def clear(self) -> None:
        await self._r.delete(self._key, self._forks_key)
