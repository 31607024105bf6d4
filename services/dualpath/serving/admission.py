"""Admission control of the scheduler: shed load with 429 before queues grow without bound.

A turn is admitted only while the oldest admitted turn whose prefill has not ended has
waited at most `max_queue_delay_s` emulated seconds. The signal is measured, not predicted:
how long a turn waits depends on its KV hit (a cached prefix is read, a miss computed),
which is unknown at admission, while the age of the oldest waiting turn is exactly the
queueing delay the next one would start behind. Past the bound an admitted turn would only
wait longer, and every queue (the global FIFO, the nodes' RPCs, the DRAM buffers) would grow
with the overload; a 429 with Retry-After tells the client to come back instead. Pure: the
scheduler shell feeds it admissions and prefill ends with their emulated times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Admission:
    now: Callable[[], float]  # emulated seconds
    max_queue_delay_s: float
    shed: int = 0
    _waiting: dict[int, float] = field(default_factory=dict)  # rid -> admitted at (FIFO)

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

    def refusal(self) -> str | None:
        """Why a new turn must be refused now, or None to admit it."""
        delay = self.queue_delay_s
        if delay <= self.max_queue_delay_s:
            return None
        self.shed += 1
        return (
            f"the oldest of {self.waiting} admitted turns has waited {delay:.1f} s for its "
            f"prefill (limit {self.max_queue_delay_s:g} s)"
        )

    def admitted(self, rid: int) -> None:
        self._waiting[rid] = self.now()

    def prefilled(self, rid: int) -> None:
        """The turn's prefill ended (or the turn failed or left before it did)."""
        self._waiting.pop(rid, None)
