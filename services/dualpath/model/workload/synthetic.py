"""`synthetic_trajectories`: the paper's 500-trajectory datasets and A.3's extra agents.

The first min(n, 500) agents are the dataset's base trajectories (stable: agent j is the
same for any n). Agent j >= 500 follows the paper's A.3 rule: a seeded pick of a base
trajectory with a synthetic round prepended, A_1 = 64-512 random tokens and
g_1 = 1, so its KV shares nothing with the base agent's. Every agent is cut at max_len after
any scaling. Base turns are built once and shared (frozen), so 48K agents cost ~1 s.
"""

from __future__ import annotations

import numpy as np

from dualpath.model.workload.arrays import I64, TurnArrays
from dualpath.model.workload.generator import (
    TraceProfile,
    cut_counts,
    first_turn_fits,
    natural_turns,
    scaled,
)
from dualpath.model.workload.profiles import (
    pooled_profile_for,
    profile_for,
    short_first_profile_for,
)
from dualpath.model.workload.trajectory import Trajectory, Turn

BASE_TRAJECTORIES = 500  # per dataset, paper section 7.2
EXTRA_PREFIX_TOKENS = (64, 512)  # A_1 of an extra agent's prepended round (A.3), inclusive
_BASE_STREAM, _EXTRA_STREAM = 0, 1  # independent seeded streams: base set vs extra agents


def synthetic_trajectories(
    max_len: int,
    n_agents: int,
    seed: int,
    append_scale: float = 1.0,
    gen_scale: float = 1.0,
    *,
    profile: TraceProfile | None = None,
) -> list[Trajectory]:
    """`n_agents` trajectories of the Table 2 dataset for `max_len`, cut at `max_len`.

    `profile` overrides the fitted dataset profile (max_len must still map to a row).
    """
    if n_agents < 1:
        raise ValueError(f"n_agents must be >= 1, got {n_agents}")
    p = profile if profile is not None else profile_for(max_len)
    base = base_arrays(p, max_len, seed, append_scale, gen_scale)
    return agents_from_base(base, n_agents, seed, max_len, append_scale)


def pooled_trajectories(
    max_len: int, n_agents: int, seed: int, append_scale: float = 1.0, gen_scale: float = 1.0
) -> list[Trajectory]:
    """As `synthetic_trajectories`, with Table 2's Append and Gen read as pooled per-turn
    means (`workload.source=synthetic-pooled`, docs/fidelity.md)."""
    profile = pooled_profile_for(max_len)
    return synthetic_trajectories(max_len, n_agents, seed, append_scale, gen_scale, profile=profile)


def short_first_trajectories(
    max_len: int, n_agents: int, seed: int, append_scale: float = 1.0, gen_scale: float = 1.0
) -> list[Trajectory]:
    """As `synthetic_trajectories`, with a short first prompt (the WEKA sessions' system
    prompt) and the rest refitted to Table 2 (`workload.source=synthetic-short-first`,
    docs/fidelity.md)."""
    profile = short_first_profile_for(max_len)
    return synthetic_trajectories(max_len, n_agents, seed, append_scale, gen_scale, profile=profile)


def agents_from_base(
    base: TurnArrays, n_agents: int, seed: int, max_len: int, append_scale: float
) -> list[Trajectory]:
    """`n_agents` agents from scaled, uncut base trajectories: the base ones cut at
    max_len, then A.3's extra agents (shared by every generator of the paper's datasets)."""
    kept = cut_counts(base, max_len)
    cut = base.head(kept)
    base_turns = [cut.turns(j) for j in range(len(cut))]
    out = [Trajectory(j, base_turns[j]) for j in range(min(n_agents, len(base)))]
    if n_agents > len(base):
        out += _extra_agents(base, base_turns, n_agents, seed, max_len, append_scale)
    return out


def base_arrays(
    p: TraceProfile, max_len: int, seed: int, append_scale: float, gen_scale: float
) -> TurnArrays:
    """The scaled, uncut base trajectories (first turns shrunk only if they cannot fit)."""
    rng = _rng(seed, _BASE_STREAM)
    natural = natural_turns(p, BASE_TRAJECTORIES, rng, max_turns=max_len // 2)
    return first_turn_fits(scaled(natural, append_scale, gen_scale), max_len)


def _extra_agents(
    base: TurnArrays,
    base_turns: list[tuple[Turn, ...]],
    n_agents: int,
    seed: int,
    max_len: int,
    append_scale: float,
) -> list[Trajectory]:
    rng = _rng(seed, _EXTRA_STREAM)
    m = n_agents - len(base)
    src = rng.integers(0, len(base), size=m)
    # A.3 does not give A_1's length. A short random prefix (64-512 tokens) makes the agent's
    # KV unique without changing the dataset's statistics, so Table 2 holds at any agent count.
    first = rng.integers(EXTRA_PREFIX_TOKENS[0], EXTRA_PREFIX_TOKENS[1] + 1, size=m)
    first = np.minimum(np.maximum(1, np.rint(first * append_scale)), max_len - 1).astype(np.int64)
    kept = _kept_after_prepend(base, src, first + 1, max_len)
    return [
        Trajectory(len(base) + i, (Turn(a, 1), *base_turns[s][:k]))
        for i, (a, s, k) in enumerate(zip(first.tolist(), src.tolist(), kept.tolist(), strict=True))
    ]


def _kept_after_prepend(base: TurnArrays, src: I64, head: I64, max_len: int) -> I64:
    """Turns of base trajectory src[i] that still fit after `head[i]` prepended tokens."""
    flat = np.cumsum(base.append + base.gen)  # nondecreasing: one searchsorted for everyone
    before = np.concatenate(([0], flat))[base.offsets[:-1]]
    idx = np.searchsorted(flat, before[src] + max_len - head, side="right")
    kept: I64 = np.clip(idx - base.offsets[src], 0, base.lengths[src])
    return kept


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,)))
