"""Streamed turns: their decode tokens handed to the front door at their emulated times."""

from __future__ import annotations

from collections.abc import Callable

from dualpath.model.core.clock import Clock, TimerHandle

TokensHook = Callable[[int, float], None]  # (tokens generated so far, emulated time of the last)


class TokenPacer:
    """Hands a streamed turn's decode tokens to its front door at their emulated times.

    The DE announces each chunk's tokens when the chunk starts (`plan`); this releases
    token j when the clock reaches its step time, so the client sees the decode cadence
    (TTST, TPOT) rather than one burst per chunk. A later plan re-times the tokens not yet
    released (a join cut the chunk short). Token 1 is the PE's and is not paced here: it goes
    out when its report arrives, a report hop after its emulated time, so every later token
    is shifted by that same hop (`started`): the client's TTST and TPOT stay exact and only
    its TTFT carries the hop, which no stream can avoid.
    """

    def __init__(self, clock: Clock, emit: TokensHook) -> None:
        self._clock = clock
        self._emit = emit
        self._times: list[float] = [0.0]  # _times[j - 1]: emulated time of token j
        self.sent = 1  # tokens handed over (the first by the turn's first-token hook)
        self._shift = 0.0  # emulated seconds the first token was late: the others are too
        self._timer: TimerHandle | None = None

    def started(self, t_first: float) -> None:
        """The first token (emulated time `t_first`) is being sent now."""
        self._shift = max(0.0, self._clock.now() - t_first)
        self._arm()

    def plan(self, tokens: int, chunk_tokens: int, t_last: float, step_s: float) -> None:
        first = tokens - chunk_tokens + 1
        if first < 2 or tokens <= self.sent:
            return  # nothing new (a stale or malformed announcement)
        # a gap (a lost announcement) is filled with the chunk's first time: never late
        gap = [t_last - (chunk_tokens - 1) * step_s] * max(0, first - 1 - len(self._times))
        del self._times[first - 1 :]
        self._times += gap
        self._times += [t_last - (tokens - j) * step_s for j in range(first, tokens + 1)]
        self._arm()

    def finish(self, tokens: int, t_last: float) -> None:
        """The turn is done: every token exists, release the rest now."""
        self.cancel()
        if tokens > self.sent:
            self.sent = tokens
            self._emit(tokens, t_last)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        self.cancel()
        if self.sent < len(self._times):
            self._timer = self._clock.call_at(self._times[self.sent] + self._shift, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.now()
        n = self.sent
        while n < len(self._times) and self._times[n] + self._shift <= now + 1e-9:
            n += 1
        if n > self.sent:
            self.sent = n
            self._emit(n, self._times[n - 1])
        self._arm()
