"""Agent trajectories (paper A.3): round i appends A_i tokens and generates g_i tokens.

Context of turn i = sum_{j<i} (A_j + g_j): everything earlier turns put in the session, whose
full 64-token blocks were persisted and are hits. Prompt of turn i = context_i + A_i.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Turn:
    """One round: `append` new prompt tokens (tool output), then exactly `gen` generated."""

    append: int
    gen: int

    def __post_init__(self) -> None:
        if self.append < 1 or self.gen < 1:
            raise ValueError(f"Turn needs append >= 1 and gen >= 1, got {self}")


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One agent's whole run. `agent_id` is also its KV session id."""

    agent_id: int
    turns: tuple[Turn, ...]

    @property
    def total(self) -> int:
        """Tokens in the session after the last turn: sum of every append and gen."""
        return sum(t.append + t.gen for t in self.turns)

    def contexts(self) -> Iterator[int]:
        """context_i of every turn (tokens already in the session when the turn starts)."""
        ctx = 0
        for t in self.turns:
            yield ctx
            ctx += t.append + t.gen

    def prompts(self) -> Iterator[int]:
        """prompt_i = context_i + A_i of every turn."""
        for ctx, t in zip(self.contexts(), self.turns, strict=True):
            yield ctx + t.append
