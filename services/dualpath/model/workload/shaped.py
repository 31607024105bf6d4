"""`synthetic-weka`: Table 2's datasets with the WEKA trace's dispersion.

The default generator (generator.py) assumes its shapes: lognormal turn counts and per-turn
sizes with chosen sigmas. This one takes every shape from real Claude Code sessions
(weka_shape.py, the shipped tables) and only rescales them to the paper's means. Each base
trajectory:

1. is a WEKA session, picked stratified (each session once before any twice), with the
   session's own turn count, mean append and mean gen, so the trace's pairing of the three
   is kept;
2. has natural length `turns_mean / mean(trace turns)` times the session's turn count
   (the trace's distribution of turns per session, rescaled);
3. draws each later turn's append and gen as the session's mean (rescaled so the mean over
   sessions is `append` / `gen` tokens) times the trace's within-session quantiles (those of
   the sessions of the same scale quartile);
4. starts with a first prompt (system prompt + task): lognormal with mean `first` and sigma
   `first_sigma`, clipped at MaxLen/4. WEKA's first requests are not task prompts (they
   carry earlier conversations: mean 91K tokens), so this stays a model, as in the default;
5. is then scaled and cut at max_len, with A.3's extra agents, exactly as the default
   (synthetic.agents_from_base).

Uniform draws are stratified over the whole dataset, so one 500-trajectory dataset already
holds the trace's quantiles. The five parameters are fitted to the five Table 2 columns
(shaped_fit.py); turn counts after the cut are mostly the cap's doing (as in the paper's
data: Turns grow with MaxLen), the sizes' dispersion is the trace's.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from dualpath.model.workload.arrays import TurnArrays, offsets_of
from dualpath.model.workload.generator import first_turn_fits, lhs_normals, scaled
from dualpath.model.workload.synthetic import BASE_TRAJECTORIES, agents_from_base
from dualpath.model.workload.table2 import K, table2_row
from dualpath.model.workload.trajectory import Trajectory
from dualpath.model.workload.weka_shape import QUANTILE_LEVELS, WekaShape, scale_bins
from dualpath.model.workload.weka_shape_data import WEKA_SHAPE

_BASE_STREAM = 2  # its own seeded stream (the default generator's base set uses 0)


@dataclass(frozen=True, slots=True)
class ShapedProfile:
    """Rescaling of the WEKA shapes to one Table 2 row (fitted by shaped_fit.py)."""

    turns_mean: float  # mean natural turn count (before the max_len cut)
    append: float  # mean over sessions of a session's mean later-turn append, tokens
    gen: float  # mean over sessions of a session's mean gen per turn, tokens
    first: float  # mean first prompt (before clipping)
    first_sigma: float  # lognormal sigma of the first prompt
    first_cap: int  # largest first prompt (a quarter of the row's MaxLen, as the default)

    def __post_init__(self) -> None:
        sizes = (self.turns_mean, self.append, self.gen, self.first, self.first_cap)
        if min(sizes) <= 0 or self.first_sigma < 0:
            raise ValueError(f"ShapedProfile: sizes must be > 0 and sigma >= 0: {self}")


# shaped_fit.fit_shaped(row, n=4000, seed=0, iters=300, start=the previous values), rounded
# to four significant digits. Achieved by these (turns, append, gen, total, context vs
# Table 2; shaped_stats n=4000 seed 0): 32K -1.5/-3.5/-1.5/+1.2/+0.1 %, 48K
# -2.8/-4.1/-2.1/+1.8/+0.2 %, 64K -4.8/-12.0/-2.3/+2.9/+3.5 % (docs/workload.md: why not
# closer with the trace's shapes).
SHAPED_PROFILES = MappingProxyType(
    {
        32 * K: ShapedProfile(351.3, 565.0, 147.3, 4984.0, 0.4530, 8 * K),
        48 * K: ShapedProfile(481.1, 405.2, 167.6, 5785.0, 0.7457, 12 * K),
        64 * K: ShapedProfile(611.1, 320.6, 172.9, 7820.0, 0.7278, 16 * K),
    }
)


def shaped_profile_for(max_len: int) -> ShapedProfile:
    return SHAPED_PROFILES[table2_row(max_len).max_len]


def weka_shaped_trajectories(
    max_len: int,
    n_agents: int,
    seed: int,
    append_scale: float = 1.0,
    gen_scale: float = 1.0,
    *,
    profile: ShapedProfile | None = None,
    shape: WekaShape = WEKA_SHAPE,
) -> list[Trajectory]:
    """`n_agents` trajectories of the Table 2 dataset for `max_len` with WEKA's dispersion
    (same contract as `synthetic_trajectories`: agent j is stable for any n, cut at max_len,
    A.3's rule beyond the 500 base trajectories)."""
    if n_agents < 1:
        raise ValueError(f"n_agents must be >= 1, got {n_agents}")
    p = profile if profile is not None else shaped_profile_for(max_len)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_BASE_STREAM,)))
    natural = shaped_natural(p, shape, BASE_TRAJECTORIES, rng, max_turns=max_len // 2)
    base = first_turn_fits(scaled(natural, append_scale, gen_scale), max_len)
    return agents_from_base(base, n_agents, seed, max_len, append_scale)


def shaped_natural(
    p: ShapedProfile, shape: WekaShape, n: int, rng: np.random.Generator, max_turns: int
) -> TurnArrays:
    """n uncut trajectories (steps 1-4 of the module doc)."""
    turns = np.asarray(shape.turns, dtype=np.float64)
    a_mean = np.asarray(shape.append_mean) / np.mean(shape.append_mean) * p.append
    g_mean = np.asarray(shape.gen_mean) / np.mean(shape.gen_mean) * p.gen
    k = len(turns)
    pick = np.concatenate([rng.permutation(k) for _ in range(-(-n // k))])[:n]
    lengths = np.rint(turns[pick] * (p.turns_mean / turns.mean()))
    lengths = np.clip(lengths, 1, max_turns).astype(np.int64)
    owner = pick[np.repeat(np.arange(n), lengths)]  # the session behind every turn
    append = a_mean[owner] * _draws(rng, shape.append_rel, scale_bins(shape.append_mean)[owner])
    gen = g_mean[owner] * _draws(rng, shape.gen_rel, scale_bins(shape.gen_mean)[owner])
    offsets = offsets_of(lengths)
    z = lhs_normals(rng, n, 1)[0]
    first = p.first * np.exp(p.first_sigma * z - p.first_sigma**2 / 2)
    append[offsets[:-1]] = np.clip(first, 1, p.first_cap)
    return TurnArrays(_tokens(append), _tokens(gen), offsets)


def _draws(
    rng: np.random.Generator, tables: tuple[tuple[float, ...], ...], bins: np.ndarray
) -> np.ndarray:
    """One draw per turn from its session's bin's quantile table (inverse CDF, linear
    between levels), the uniforms stratified over all turns."""
    m = len(bins)
    u = (rng.permutation(m) + rng.random(m)) / m
    out = np.empty(m)
    for b, table in enumerate(tables):
        sel = bins == b
        out[sel] = np.interp(u[sel], QUANTILE_LEVELS, np.asarray(table))
    return out


def _tokens(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(1, np.rint(x)).astype(np.int64)
    return out
