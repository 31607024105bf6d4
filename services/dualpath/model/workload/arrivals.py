"""When agents start: all at t=0 (offline, paper section 7.3) or Poisson at APS (section 7.4)."""

from __future__ import annotations

import numpy as np

_ARRIVAL_STREAM = 2  # separate from the trajectory streams: same seed, independent draws


def offline_arrivals(n_agents: int) -> list[float]:
    """Offline batch: every agent's first turn arrives at t = 0."""
    if n_agents < 0:
        raise ValueError(f"n_agents must be >= 0, got {n_agents}")
    return [0.0] * n_agents


def online_arrivals(aps: float, n_agents: int, seed: int) -> list[float]:
    """Poisson arrivals at `aps` agents per second: cumulative exponential gaps, from t = 0."""
    if not aps > 0:
        raise ValueError(f"aps must be > 0, got {aps}")
    if n_agents < 0:
        raise ValueError(f"n_agents must be >= 0, got {n_agents}")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_ARRIVAL_STREAM,)))
    times: list[float] = np.cumsum(rng.exponential(1.0 / aps, size=n_agents)).tolist()
    return times
