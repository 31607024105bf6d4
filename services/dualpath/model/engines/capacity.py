"""Byte-capacity accounting (DRAM buffers, HBM) with FIFO waiters and a join helper."""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable

from dualpath.compiled import mypyc_attr


# An exception class cannot be a compiled (native) class: the rest of the module can.
@mypyc_attr(native_class=False)
class CapacityError(RuntimeError):
    pass


class CapacityPool:
    """A capacity in bytes. `acquire` waits (FIFO, so a large request is not starved by
    small ones) until the bytes are free; `release` gives them back."""

    def __init__(self, name: str, capacity: float) -> None:
        if capacity <= 0:
            raise CapacityError(f"{name}: capacity must be > 0 bytes")
        self.name = name
        self.capacity = capacity
        self.used = 0.0
        self.peak = 0.0
        # FIFO of (bytes, what to call once they are granted)
        self._waiters: deque[tuple[float, Callable[[], None]]] = deque()

    @property
    def free(self) -> float:
        return self.capacity - self.used

    def try_acquire(self, nbytes: float) -> bool:
        if self._waiters or self.used + nbytes > self.capacity:
            return False
        self._take(nbytes)
        return True

    def acquire_then(self, nbytes: float, then: Callable[[], None]) -> None:
        """Take `nbytes`, then call `then`: at once if they are free (and nobody waits),
        else from the `release` that frees them (FIFO). For state machines."""
        self._check(nbytes)
        if self.try_acquire(nbytes):
            then()
        else:
            self._waiters.append((nbytes, then))

    async def acquire(self, nbytes: float) -> None:
        self._check(nbytes)
        if self.try_acquire(nbytes):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, functools.partial(fut.set_result, None))
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            # A waiter that gives up (its RPC was cancelled, its request abandoned) must
            # neither keep its place nor keep bytes granted just before the cancel arrived.
            if fut.done() and not fut.cancelled():
                self.release(nbytes)
            else:
                self._waiters.remove(entry)
                self._grant()  # the head may have changed: later waiters may fit now
            raise

    def _check(self, nbytes: float) -> None:
        if nbytes > self.capacity:
            raise CapacityError(
                f"{self.name}: one request needs {nbytes / 1e9:.2f} GB but the capacity is "
                f"{self.capacity / 1e9:.2f} GB; raise the capacity or shorten max_len"
            )

    def release(self, nbytes: float) -> None:
        self.used -= nbytes
        if self.used < -1e-6 * self.capacity:
            raise CapacityError(f"{self.name}: released more than was acquired")
        self.used = max(self.used, 0.0)
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            nbytes_w, granted = self._waiters.popleft()
            self._take(nbytes_w)
            granted()

    def _take(self, nbytes: float) -> None:
        self.used += nbytes
        self.peak = max(self.peak, self.used)


class Join:
    """Counts outstanding callbacks; `then(cb)` runs `cb` once all have fired.

    Cheaper than gathering one future per flow: flows call `done` as their on_done hook.
    A state machine's next step, not a coroutine, waits on it (docs/engines.md).
    """

    __slots__ = ("_pending", "_then")

    def __init__(self) -> None:
        self._pending = 0
        self._then: Callable[[], None] | None = None

    def add(self) -> Callable[[], None]:
        self._pending += 1
        return self.done

    def done(self) -> None:
        self._pending -= 1
        if self._pending == 0 and self._then is not None:
            then, self._then = self._then, None
            then()

    def then(self, callback: Callable[[], None]) -> None:
        """Run `callback` once every added callback has fired: at once if none is left
        (as awaiting a finished join did not yield), else from the last `done`."""
        if self._pending == 0:
            callback()
        else:
            self._then = callback

    async def wait(self) -> None:
        """Awaitable `then` (the read path's coroutines, until they become callbacks)."""
        if self._pending == 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._then = lambda: fut.set_result(None)
        await fut
