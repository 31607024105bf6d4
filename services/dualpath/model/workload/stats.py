"""Table 2 statistics of a set of trajectories, with the averaging each column uses.

The paper's columns cannot all be plain per-turn means: at 64K, 157 turns x (429 + 176)
tokens per turn would be 95K tokens, over the 64K cap. They are consistent if

- Turns and Total are means over trajectories;
- Append and Gen are means over trajectories of each trajectory's per-turn mean. Short
  trajectories (few, large turns, led by a long first prompt) weigh as much as long ones,
  which lifts these means well above the pooled per-turn means Total/Turns;
- Context is the mean over all requests (turns) of context_i, the tokens already in the
  session when the turn starts (its storage KV hit, before the turn's append).

The paper's 98.7% hit rate at 64K equals 1 - Append/Context of its own row (1 - 429/32,721);
`hit_rate` here is the block-exact version: every full 64-token block of context_i is a hit,
over all prompt tokens, pooled over requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dualpath.model.workload.arrays import TurnArrays, from_trajectories
from dualpath.model.workload.trajectory import Trajectory


def trajectory_stats(trajs: Sequence[Trajectory], block_tokens: int = 64) -> dict[str, float]:
    """Table 2 columns (turns, append, gen, total, context) plus pooled means and hit rate."""
    return arrays_stats(from_trajectories(trajs), block_tokens)


def arrays_stats(arrs: TurnArrays, block_tokens: int = 64) -> dict[str, float]:
    if len(arrs) == 0 or np.any(arrs.lengths == 0):
        raise ValueError("trajectory_stats needs at least one trajectory, each with a turn")
    lengths = arrs.lengths.astype(np.float64)
    starts = arrs.offsets[:-1]
    per_traj_append = np.add.reduceat(arrs.append, starts) / lengths
    per_traj_gen = np.add.reduceat(arrs.gen, starts) / lengths
    context = arrs.cumulative() - arrs.append - arrs.gen
    prompt = context + arrs.append
    hits = (context // block_tokens) * block_tokens
    return {
        "trajectories": float(len(arrs)),
        "turns": float(lengths.mean()),
        "append": float(per_traj_append.mean()),
        "gen": float(per_traj_gen.mean()),
        "total": float((np.add.reduceat(arrs.append + arrs.gen, starts)).mean()),
        "context": float(context.mean()),
        "prompt": float(prompt.mean()),
        "append_pooled": float(arrs.append.mean()),
        "gen_pooled": float(arrs.gen.mean()),
        "first_append": float(arrs.append[starts].mean()),
        "hit_rate": float(hits.sum() / prompt.sum()),
        # the paper's 98.7% is this expression of its own columns (0 if no context at all)
        "table_hit_rate": float(max(0.0, 1.0 - per_traj_append.mean() / max(context.mean(), 1))),
    }
