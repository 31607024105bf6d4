"""What a node's DRAM buffer holds for each attempt of a turn, so an abandoned attempt gives
its bytes back.

A KV read reserves buffer on the reading node (and the whole prompt's on the DE) before the
bytes move; the reservation is consumed where the core frees it (the PE's release, the DE's
receive). When the scheduler abandons an attempt instead (a read failed, the client left,
a node on its path was lost), nothing on this node would ever free it: the scheduler sends
`Release`, which frees it and remembers the attempt, so a reservation that was still
waiting for buffer, or a hand-over still on its way, is refused when it arrives.
"""

from __future__ import annotations

from collections import OrderedDict

from dualpath.model.engines.capacity import CapacityPool

Key = tuple[int, int]  # (request id, attempt)
REMEMBERED = 65_536  # abandoned attempts kept to refuse late arrivals (bounded memory)


class Reservations:
    def __init__(self, pool: CapacityPool) -> None:
        self.pool = pool
        self._held: dict[Key, float] = {}
        self._abandoned: OrderedDict[Key, None] = OrderedDict()
        self.released_bytes = 0.0  # given back by `release` (abandoned attempts)

    def abandoned(self, key: Key) -> bool:
        return key in self._abandoned

    def hold(self, key: Key, nbytes: float) -> bool:
        """Record bytes just acquired for `key`. An attempt already abandoned gets nothing:
        the bytes go straight back and the caller must refuse the work (False)."""
        if key in self._abandoned:
            self.pool.release(nbytes)
            return False
        self._held[key] = self._held.get(key, 0.0) + nbytes
        return True

    def holds(self, key: Key) -> bool:
        return key in self._held

    def take(self, key: Key) -> float:
        """The owner consumes the reservation (the core frees the bytes itself)."""
        return self._held.pop(key, 0.0)

    def release(self, key: Key) -> float:
        """Abandon `key`: free what it holds and refuse it from now on. Idempotent."""
        self._abandoned[key] = None
        self._abandoned.move_to_end(key)
        while len(self._abandoned) > REMEMBERED:
            self._abandoned.popitem(last=False)
        nbytes = self._held.pop(key, 0.0)
        if nbytes:
            self.pool.release(nbytes)
            self.released_bytes += nbytes
        return nbytes
