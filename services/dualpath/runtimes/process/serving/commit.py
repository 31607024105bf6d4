"""The storage's block index commits: a write is acknowledged only once its index entry is in
Redis, so a storage killed right after an acknowledgement restores every block it
acknowledged (docs/faults.md, "Storage restart").

Group commit: every write that needs a commit waits for the next round, and one round
writes whatever became dirty since the previous one (forks first, then the sessions'
stored-run lengths) in one pipeline; rounds run one after another, so a round that ends
after a writer asked for it covers that writer's entries. A round that Redis does not
take leaves its entries with the index's own retry (runtimes/process/control/blockindex.py) and
tells its
writers no: they answer UNAVAILABLE and their decode nodes send the write again.
"""

from __future__ import annotations

import asyncio

from dualpath.runtimes.process.control import BlockIndex


class IndexCommits:
    def __init__(self, index: BlockIndex) -> None:
        self.index = index
        self.dirty: dict[int, int] = {}  # owner session -> its stored-run length
        self.new_forks: set[tuple[int, int, int]] = set()
        self.durable: dict[int, int] = {}  # owner -> run length Redis is known to hold
        self._unsure: list[tuple[int, int]] = []  # sent in a round Redis may not have taken
        self._waiters: list[asyncio.Future[bool]] = []
        self._round: asyncio.Task[None] | None = None
        self.rounds = 0

    def loaded(self, items: dict[int, int]) -> None:
        """What a restarted store read back from the index is durable by definition."""
        for owner, n in items.items():
            self.durable[owner] = max(n, self.durable.get(owner, 0))

    def mark(self, owner: int, stored: int, forks: set[tuple[int, int, int]]) -> None:
        self.dirty[owner] = max(stored, self.dirty.get(owner, 0))
        self.new_forks |= forks

    async def commit(self) -> bool:
        """Wait for the next round to end: True if everything marked before this call (and
        everything before it) is in Redis."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._round is None or self._round.done():
            self._round = asyncio.create_task(self._rounds(), name="index-commit")
        return await asyncio.shield(fut)  # a cancelled writer must not cancel the round

    async def _rounds(self) -> None:
        while self._waiters:
            waiters, self._waiters = self._waiters, []
            try:
                ok = await self.flush()
            except BaseException:
                for w in waiters:
                    if not w.done():
                        w.set_result(False)
                raise
            for w in waiters:
                if not w.done():
                    w.set_result(ok)

    async def flush(self) -> bool:
        """One round (also the graceful stop's last one); True if the index is caught up."""
        self.rounds += 1
        if self.new_forks:  # forks first: a reloaded block needs its chain's lineage
            forks, self.new_forks = sorted(self.new_forks), set()
            await self.index.record_forks(forks)
        items, self.dirty = list(self.dirty.items()), {}
        await self.index.record_many(items)  # never raises: keeps what Redis refused
        self._unsure += items
        if self.index.behind:
            return False
        for owner, n in self._unsure:  # the index wrote everything it holds, these too
            self.durable[owner] = max(n, self.durable.get(owner, 0))
        self._unsure = []
        return True

    async def close(self) -> None:
        if self._round is not None:
            await asyncio.gather(self._round, return_exceptions=True)
