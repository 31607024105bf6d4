"""The virtual loop's own iteration and sleep run any program exactly as the stock ones do.

`VirtualTimeLoop._run_once` and `VirtualClock.sleep` re-implement asyncio's for speed; a run's
results depend on the order of same-instant events, so they must keep that order. Reference:
the virtual loop as it was, asyncio's own heap, iteration, `call_at` and `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.core.clock import VirtualClock, VirtualTimeLoop

Trace = list[tuple[str, float]]
# Few distinct delays, so that many events fall on the same instant (ties decide the order).
DELAYS = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5])
OPS = st.lists(
    st.tuples(st.sampled_from(["sleep", "until", "timer", "cancel", "spawn", "kill"]), DELAYS),
    max_size=12,
)


class _StockSelector(selectors.DefaultSelector):
    def __init__(self, loop: _StockLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise AssertionError("the reference programs never deadlock")
        if timeout > 0:
            self._vloop.vtime = self._vloop._scheduled[0].when()  # type: ignore[attr-defined]
        return []


class _StockLoop(asyncio.SelectorEventLoop):
    """The virtual loop as it was: asyncio's own heap of handles, iteration and call_at."""

    def __init__(self) -> None:
        self.vtime = 0.0
        super().__init__(selector=_StockSelector(self))

    def time(self) -> float:
        return self.vtime


class _StockClock:
    """The virtual clock as it was: `asyncio.sleep` and the running loop's methods."""

    def __init__(self, loop: _StockLoop) -> None:
        self._loop = loop

    def now(self) -> float:
        return self._loop.time()

    async def sleep(self, dt: float) -> None:
        await asyncio.sleep(max(0.0, dt))

    async def sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(0.0, t - self._loop.time()))

    def call_at(self, t: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_at(max(t, self._loop.time()), callback)

    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)


def _run(loop: asyncio.AbstractEventLoop, clock: Any, main: Callable[..., Any]) -> Trace:
    try:
        trace: Trace = loop.run_until_complete(main(clock))
        return trace
    finally:
        loop.close()


def _program(workers: list[list[tuple[str, float]]]) -> Callable[[Any], Any]:
    async def main(clock: Any) -> Trace:
        trace: Trace = []
        handles: list[asyncio.TimerHandle] = []
        tasks: list[asyncio.Task[None]] = []

        def note(tag: str) -> Callable[[], None]:
            return lambda: trace.append((tag, clock.now()))

        async def child(tag: str, d: float) -> None:
            await clock.sleep(d)
            trace.append((tag, clock.now()))

        async def worker(w: int, ops: list[tuple[str, float]]) -> None:
            for i, (op, d) in enumerate(ops):
                tag = f"{w}.{i}"
                if op == "sleep":
                    await clock.sleep(d)
                elif op == "until":
                    await clock.sleep_until(clock.now() + d)
                elif op == "timer":
                    handles.append(clock.call_at(clock.now() + d, note(tag)))
                elif op == "cancel" and handles:
                    handles.pop(0).cancel()
                elif op == "spawn":
                    tasks.append(clock.create_task(child(tag, d)))
                elif op == "kill" and tasks:
                    tasks.pop(0).cancel()  # often while it sleeps: its timer is cancelled
                trace.append((tag, clock.now()))

        await asyncio.gather(*(worker(w, ops) for w, ops in enumerate(workers)))
        await asyncio.gather(*tasks, return_exceptions=True)
        await clock.sleep(2.0)  # let the last timers fire
        return trace

    return main


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, min_size=1, max_size=5))
def test_any_program_runs_as_on_the_stock_loop(workers: list[list[tuple[str, float]]]) -> None:
    main = _program(workers)
    ours = VirtualTimeLoop()
    stock = _StockLoop()
    assert _run(ours, VirtualClock(ours), main) == _run(stock, _StockClock(stock), main)


def test_many_cancelled_timers_are_compacted_in_the_same_order() -> None:
    """Past 100 timers with over half cancelled, the stock iteration rebuilds its heap; the
    virtual loop does the same, so the order is kept there too."""

    async def main(clock: Any) -> Trace:
        trace: Trace = []

        def note(i: int) -> Callable[[], None]:
            return lambda: trace.append((str(i), clock.now()))

        handles = [clock.call_at(1.0 + (i % 7) * 0.25, note(i)) for i in range(300)]
        for h in handles[::3] + handles[1::3]:
            h.cancel()
        await clock.sleep(5.0)
        return trace

    ours, stock = VirtualTimeLoop(), _StockLoop()
    got = _run(ours, VirtualClock(ours), main)
    assert len(got) == 100
    assert got == _run(stock, _StockClock(stock), main)


def test_cancelling_a_sleeper_cancels_its_timer() -> None:
    """As with `asyncio.sleep`: nothing of a cancelled sleep stays on the loop's heap."""

    async def main(clock: VirtualClock) -> int:
        task = clock.create_task(clock.sleep(100.0))
        await clock.sleep(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        live = [h for _, h in loop._timers if not h.cancelled()]  # type: ignore[attr-defined]
        return len(live)

    loop = VirtualTimeLoop()
    try:
        assert loop.run_until_complete(main(VirtualClock(loop))) == 0
    finally:
        loop.close()


def test_a_failing_callback_reaches_the_handler_as_on_the_stock_loop() -> None:
    """The inlined `Handle._run`: the loop's exception handler gets the same context, and the
    loop goes on with the next callbacks."""

    def boom() -> None:
        raise ValueError("bad flow")

    def run(loop: asyncio.AbstractEventLoop, clock: Any) -> tuple[list[str], Trace]:
        seen: list[str] = []
        loop.set_exception_handler(
            lambda _l, ctx: seen.append(f"{ctx['message']}|{ctx['exception']!r}")
        )

        async def main(clock: Any) -> Trace:
            trace: Trace = []
            clock.call_at(1.0, boom)
            clock.call_at(1.0, lambda: trace.append(("after", clock.now())))
            await clock.sleep(2.0)
            return trace

        return seen, _run(loop, clock, main)

    ours, stock = VirtualTimeLoop(), _StockLoop()
    got = run(ours, VirtualClock(ours))
    assert got == run(stock, _StockClock(stock))
    assert got[1] == [("after", 1.0)]
    assert got[0] and "ValueError('bad flow')" in got[0][0]
