"""Admission control of the scheduler: shed load with 429 before queues grow without bound.

A turn is admitted only while the wait it would see stays within `max_queue_delay_s`
emulated seconds: both the age of the oldest admitted turn whose prefill has not ended (the
delay already there) and, by Little's law, the turns waiting divided by the rate at which
prefills have been ending over the last `window_s` (the delay a newcomer queues behind).
Both are measured, not predicted from the model: how long a prefill takes depends on its
KV hit (a cached prefix is read, a miss computed), unknown at admission. Past the bound an
admitted turn would only wait longer, and every queue (the global FIFO, the nodes' RPCs, the
DRAM buffers) would grow with the overload; a 429 with Retry-After tells the client to come
back instead. Pure: the scheduler shell feeds it admissions and prefill ends with their
emulated times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Admission:
    now: Callable[[], float]  # emulated seconds
    max_queue_delay_s: float
    window_s: float = 10.0  # emulated seconds of prefill ends the rate is measured over
    # with fewer turns waiting, a rate measured over a few ends (start-up, a node that died
    # with turns in flight) can be badly low: only the measured age decides then, and a
    # handful of waiting turns cannot hide a long wait from it
    min_waiting: int = 32
    # nor is a rate measured over fewer ends than this trusted: a burst's first forward
    # ends only a few of its turns. Few, because until then only the age protects: at 16,
    # a 10x overload (`python -m dualpath.runtimes.process.launcher.overload`) admitted
    # turns whose TTFT p99 was 27 s against the 8 s bound; at 4, 9.8 s
    min_ends: int = 4
    shed: int = 0
    _waiting: dict[int, float] = field(default_factory=dict)  # rid -> admitted at (FIFO)
    # emulated times of the prefill ends of the current busy spell (the queue non-empty
    # since `_busy_since`), within the last `window_s`
    _ends: deque[float] = field(default_factory=deque)
    _busy_since: float = 0.0

    def __post_init__(self) -> None:
        if not self.max_queue_delay_s > 0:
            raise ValueError(f"max_queue_delay_s must be > 0, got {self.max_queue_delay_s}")

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def queue_delay_s(self) -> float:
        """How long the oldest admitted turn has waited for its prefill to end."""
        if not self._waiting:
            return 0.0
        return max(0.0, self.now() - next(iter(self._waiting.values())))

    @property
    def expected_wait_s(self) -> float:
        """Little's law: waiting turns / prefill ends per second (0 before any ended)."""
        now = self.now()
        while self._ends and self._ends[0] < now - self.window_s:
            self._ends.popleft()
        if len(self._ends) < self.min_ends or len(self._waiting) < self.min_waiting:
            return 0.0
        # The rate over the time the ends could take: since the spell began, at most the
        # window. Measured from the first end with a 1 s floor instead, a burst of every
        # agent's first turn read as 481 waiting behind 31 ends per "second" (15.5 s, the
        # oldest at 0.3 s) when those 31 had ended within 0.3 s: a 429 for a cluster that
        # served the burst in under a second (`python -m dualpath.bench.process`).
        span = max(min(self.window_s, now - self._busy_since), self.window_s / 1000)
        return len(self._waiting) / (len(self._ends) / span)

    def refusal(self) -> str | None:
        """Why a new turn must be refused now, or None to admit it."""
        age, ahead = self.queue_delay_s, self.expected_wait_s
        if max(age, ahead) <= self.max_queue_delay_s:
            return None
        self.shed += 1
        return (
            f"{self.waiting} admitted turns wait for prefill (oldest {age:.1f} s, a new one "
            f"would wait ≈{ahead:.1f} s; limit {self.max_queue_delay_s:g} s)"
        )

    def admitted(self, rid: int) -> None:
        now = self.now()
        if not self._waiting:  # a busy spell begins: the last one's ends say nothing of it
            self._busy_since = now
            self._ends.clear()
        self._waiting[rid] = now

    def prefilled(self, rid: int) -> None:
        """The turn's prefill ended (or the turn failed or left before it did)."""
        if self._waiting.pop(rid, None) is not None:
            self._ends.append(self.now())
