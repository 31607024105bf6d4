"""How SHAPED_PROFILES were obtained: rescale the WEKA shapes to a Table 2 row.

Five parameters (the mean natural turn count, the mean session append and gen, the first
prompt's mean and sigma) against the five Table 2 columns, as fit.py does for the default
generator: Nelder-Mead on log-parameters with common random numbers, weighted squared
log-errors (fit.WEIGHTS). The trace's shapes are not touched: only these rescale them.
Re-run with `fit_shaped(row, start=SHAPED_PROFILES[row.max_len])`: a few minutes per row.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dualpath.model.workload.fit import nelder_mead, table2_loss
from dualpath.model.workload.generator import cut_counts
from dualpath.model.workload.shaped import ShapedProfile, shaped_natural
from dualpath.model.workload.stats import arrays_stats
from dualpath.model.workload.table2 import Table2Row
from dualpath.model.workload.weka_shape import WekaShape
from dualpath.model.workload.weka_shape_data import WEKA_SHAPE

FITTED = ("turns_mean", "append", "gen", "first", "first_sigma")


def shaped_stats(
    p: ShapedProfile, max_len: int, n: int, seed: int, shape: WekaShape = WEKA_SHAPE
) -> dict[str, float]:
    """Table 2 statistics of n generated trajectories cut at max_len."""
    arrs = shaped_natural(p, shape, n, np.random.default_rng(seed), max_turns=max_len // 2)
    return arrays_stats(arrs.head(cut_counts(arrs, max_len)))


def fit_shaped(
    row: Table2Row,
    n: int = 4000,
    seed: int = 0,
    iters: int = 300,
    start: ShapedProfile | None = None,
) -> ShapedProfile:
    """Fit the five rescaling parameters to `row` (fixed seed: common random numbers)."""
    if start is None:
        start = ShapedProfile(3 * row.turns, 300.0, 170.0, 8000.0, 0.5, row.max_len // 4)

    def make(x: np.ndarray) -> ShapedProfile:
        return dataclasses.replace(start, **dict(zip(FITTED, np.exp(x).tolist(), strict=True)))

    def loss(x: np.ndarray) -> float:
        return table2_loss(shaped_stats(make(x), row.max_len, n, seed), row)

    x0 = np.log([getattr(start, f) for f in FITTED])
    return make(nelder_mead(loss, x0, step=0.3, iters=iters))
