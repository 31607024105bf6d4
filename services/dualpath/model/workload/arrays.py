"""Per-turn arrays of many trajectories: the fast form generation and statistics work on.

Trajectory objects hold one `Turn` per round; 48K agents x ~150 rounds is millions of them,
so the generator and `trajectory_stats` do their arithmetic on flat numpy arrays instead and
only the final result is turned into objects (sharing `Turn`s between agents).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dualpath.model.workload.trajectory import Trajectory, Turn

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TurnArrays:
    """Turns of n trajectories, flat: trajectory j is rows offsets[j]:offsets[j+1]."""

    append: I64
    gen: I64
    offsets: I64  # length n+1, offsets[0] == 0

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> I64:
        return np.diff(self.offsets)

    def cumulative(self) -> I64:
        """Session tokens after each turn, restarting at 0 for every trajectory."""
        flat = np.cumsum(self.append + self.gen)
        before = np.concatenate(([0], flat))[self.offsets[:-1]]
        out: I64 = flat - np.repeat(before, self.lengths)
        return out

    def head(self, kept: I64) -> TurnArrays:
        """The first kept[j] turns of every trajectory j."""
        idx = np.repeat(self.offsets[:-1], kept) + _ranks(kept)
        return TurnArrays(self.append[idx], self.gen[idx], offsets_of(kept))

    def turns(self, j: int) -> tuple[Turn, ...]:
        lo, hi = int(self.offsets[j]), int(self.offsets[j + 1])
        pairs = zip(self.append[lo:hi].tolist(), self.gen[lo:hi].tolist(), strict=True)
        return tuple(Turn(a, g) for a, g in pairs)


def from_trajectories(trajs: Sequence[Trajectory]) -> TurnArrays:
    lengths = np.fromiter((len(t.turns) for t in trajs), dtype=np.int64, count=len(trajs))
    total = int(lengths.sum())
    append = np.fromiter((u.append for t in trajs for u in t.turns), np.int64, count=total)
    gen = np.fromiter((u.gen for t in trajs for u in t.turns), np.int64, count=total)
    return TurnArrays(append, gen, offsets_of(lengths))


def offsets_of(lengths: I64) -> I64:
    return np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


def _ranks(lengths: I64) -> I64:
    """0..len-1 within each segment, for segments of the given lengths."""
    starts = np.repeat(offsets_of(lengths)[:-1], lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) - starts
