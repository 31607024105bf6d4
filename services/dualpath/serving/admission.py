"""Admission control of the scheduler: shed load with 429 before queues grow without bound.

A turn is admitted only while the prefill work already waiting would take at most
`max_queue_delay_s` emulated seconds at the cluster's prefill rate: every PE GPU processes
β prompt tokens in `policy.beta_s` seconds (paper A.4; the same unit as tok_e). Past that,
an admitted turn would only wait longer, and every queue (the global FIFO, the nodes'
RPCs, the DRAM buffers) would grow with the overload; a 429 with Retry-After tells the
client to come back instead. Pure: the scheduler shell feeds it admitted and prefilled
tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class Admission:
    prefill_tokens_per_s: float  # the whole cluster's
    max_queue_delay_s: float
    waiting_tokens: int = 0  # prompt tokens of admitted turns whose prefill has not ended
    shed: int = 0

    def __post_init__(self) -> None:
        if not (self.prefill_tokens_per_s > 0 and math.isfinite(self.prefill_tokens_per_s)):
            raise ValueError(f"prefill rate must be > 0, got {self.prefill_tokens_per_s}")
        if not self.max_queue_delay_s > 0:
            raise ValueError(f"max_queue_delay_s must be > 0, got {self.max_queue_delay_s}")

    @property
    def queue_delay_s(self) -> float:
        """Emulated seconds the waiting prefill work needs at the cluster's rate."""
        return self.waiting_tokens / self.prefill_tokens_per_s

    def refusal(self) -> str | None:
        """Why a new turn must be refused now, or None to admit it."""
        if self.queue_delay_s <= self.max_queue_delay_s:
            return None
        self.shed += 1
        return (
            f"the prefill queue holds {self.queue_delay_s:.1f} s of work "
            f"(limit {self.max_queue_delay_s:g} s)"
        )

    def admitted(self, prompt_tokens: int) -> None:
        self.waiting_tokens += prompt_tokens

    def prefilled(self, prompt_tokens: int) -> None:
        """The turn's prefill ended (or the turn failed before it did)."""
        self.waiting_tokens = max(0, self.waiting_tokens - prompt_tokens)
