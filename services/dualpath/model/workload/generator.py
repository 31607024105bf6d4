"""The seeded trajectory model behind `synthetic_trajectories`, on flat arrays.

Each trajectory draws four latent normals: a log-scale for its per-turn sizes (heterogeneity
between tasks: the key to Table 2, see stats.py), a correlated one for its generation sizes,
its first prompt (system prompt + task: thousands of tokens, with no KV hit) and its natural
number of turns (when the agent would finish if nothing stopped it). Later turns then draw
lognormal append (tool output: heavy-tailed) and gen sizes around the trajectory's scale.
Latents are Latin-hypercube stratified so 500 trajectories already show the population's
averages instead of one sample's luck. Trajectories are generated uncut; `cut_counts` then
stops each one before its session would exceed max_len (paper section 7.3, Fig. 9 method:
scale every round, then cut).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from dualpath.model.workload.arrays import I64, TurnArrays, offsets_of

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TraceProfile:
    """Generator parameters of one dataset. The first five are fitted to Table 2 (fit.py)."""

    append: float  # mean append of a later turn in a scale-1 trajectory
    gen: float  # mean gen of a turn in a scale-1 trajectory
    spread: float  # sigma of the per-trajectory log-scale
    first: float  # mean first-turn prompt
    turns_median: float  # median natural turn count
    first_cap: int  # largest first prompt (a quarter of the dataset's MaxLen)
    turns_sigma: float = 1.0  # sigma of log natural turns (fixed per row, see profiles.py)
    gen_corr: float = 0.7  # correlation of a trajectory's gen scale with its append scale
    append_sigma: float = 1.0  # per-turn lognormal sigma of append (tool output)
    gen_sigma: float = 0.5  # per-turn lognormal sigma of gen (tool calls)
    first_sigma: float = 0.5  # lognormal sigma of the first prompt

    def __post_init__(self) -> None:
        sizes = (self.append, self.gen, self.first, self.turns_median, self.first_cap)
        sigmas = (self.spread, self.turns_sigma, self.append_sigma, self.gen_sigma)
        if min(sizes) <= 0 or min(sigmas) < 0 or self.first_sigma < 0:
            raise ValueError(f"TraceProfile: sizes must be > 0 and sigmas >= 0: {self}")
        if not -1 <= self.gen_corr <= 1:
            raise ValueError(f"TraceProfile: gen_corr must be in [-1, 1], got {self.gen_corr}")


def lhs_normals(rng: np.random.Generator, n: int, dims: int) -> F64:
    """dims x n standard normals, each row stratified: one draw per 1/n quantile slice."""
    inv = NormalDist().inv_cdf
    out = np.empty((dims, n))
    for d in range(dims):
        u = (rng.permutation(n) + rng.random(n)) / n
        u = np.clip(u, 1e-12, 1 - 1e-12)  # inv_cdf is undefined at exactly 0
        out[d] = [inv(x) for x in u]
    return out


def lognormal_mean(rng: np.random.Generator, mean: float, sigma: float, size: int) -> F64:
    """Lognormal draws with the given mean (not median)."""
    return mean * np.exp(sigma * rng.standard_normal(size) - sigma * sigma / 2)


def first_prompts(rng: np.random.Generator, p: TraceProfile, z: F64) -> I64:
    """First-turn prompts from normals z (also used for A.3's synthetic prepended round)."""
    raw = p.first * np.exp(p.first_sigma * z - p.first_sigma**2 / 2)
    return np.clip(np.rint(raw), 1, p.first_cap).astype(np.int64)


def natural_turns(p: TraceProfile, n: int, rng: np.random.Generator, max_turns: int) -> TurnArrays:
    """n uncut trajectories; `max_turns` bounds a trajectory (no cut can keep more)."""
    z = lhs_normals(rng, n, 4)
    scale = np.exp(p.spread * z[0])
    mixed = p.gen_corr * z[0] + math.sqrt(1 - p.gen_corr**2) * z[1]
    gen_scale = np.exp(p.spread * mixed)
    lengths = np.clip(np.rint(p.turns_median * np.exp(p.turns_sigma * z[3])), 1, max_turns)
    lengths = lengths.astype(np.int64)
    owner = np.repeat(np.arange(n), lengths)
    m = len(owner)
    append = lognormal_mean(rng, p.append, p.append_sigma, m) * scale[owner]
    gen = lognormal_mean(rng, p.gen, p.gen_sigma, m) * gen_scale[owner]
    offsets = offsets_of(lengths)
    append[offsets[:-1]] = first_prompts(rng, p, z[2])
    return TurnArrays(_tokens(append), _tokens(gen), offsets)


def scaled(arrs: TurnArrays, append_scale: float, gen_scale: float) -> TurnArrays:
    """Every round's append (and gen) times a constant, as in the paper's Fig. 9 sweep."""
    if append_scale <= 0 or gen_scale <= 0:
        raise ValueError(f"scales must be > 0, got append {append_scale}, gen {gen_scale}")
    if append_scale == 1 and gen_scale == 1:
        return arrs
    return TurnArrays(
        _tokens(arrs.append * append_scale), _tokens(arrs.gen * gen_scale), arrs.offsets
    )


def cut_counts(arrs: TurnArrays, max_len: int) -> I64:
    """Turns kept per trajectory: the leading turns whose session stays within max_len.

    Every trajectory must have at least one turn (reduceat misreads empty segments).
    """
    fits = arrs.cumulative() <= max_len
    # the session only grows, so the turns that fit are a leading run: counting suffices
    kept: I64 = np.add.reduceat(fits.astype(np.int64), arrs.offsets[:-1])
    return kept


def first_turn_fits(arrs: TurnArrays, max_len: int) -> TurnArrays:
    """Shrink first turns that alone exceed max_len (only absurd scales do that)."""
    first = arrs.offsets[:-1]
    gen = arrs.gen.copy()
    gen[first] = np.minimum(gen[first], max_len // 2)
    append = arrs.append.copy()
    append[first] = np.minimum(append[first], max_len - gen[first])
    return TurnArrays(append, gen, arrs.offsets)


def _tokens(x: npt.NDArray[np.floating[Any]]) -> I64:
    out: I64 = np.maximum(1, np.rint(x)).astype(np.int64)
    return out
