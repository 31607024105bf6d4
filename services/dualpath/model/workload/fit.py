"""How the PROFILES were obtained: fit five generator parameters to a Table 2 row.

The five fitted fields of `TraceProfile` (append, gen, spread, first, turns_median) are
found by Nelder-Mead on log-parameters, minimising weighted squared log-errors of the five
Table 2 columns; the other fields are fixed a priori (see docs/workload.md). Weights follow
what the emulation is most sensitive to: Context (KV bytes per request) first, then Turns
and Total, then Gen, then Append. Re-run with
`fit_profile(row, start=PROFILES[row.max_len])` (the start carries the row's fixed fields):
about a minute per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from dualpath.model.workload.generator import TraceProfile, cut_counts, natural_turns
from dualpath.model.workload.stats import arrays_stats
from dualpath.model.workload.table2 import Table2Row

WEIGHTS = {"context": 4.0, "turns": 3.0, "total": 3.0, "gen": 2.0, "append": 1.0}
FITTED = ("append", "gen", "spread", "first", "turns_median")


def profile_stats(p: TraceProfile, max_len: int, n: int, seed: int) -> dict[str, float]:
    """Table 2 statistics of n generated trajectories cut at max_len."""
    arrs = natural_turns(p, n, np.random.default_rng(seed), max_turns=max_len // 2)
    return arrays_stats(arrs.head(cut_counts(arrs, max_len)))


# How Table 2's Append and Gen columns are read (docs/workload.md, docs/fidelity.md):
# per-trajectory means of per-turn sizes (the default), or plain per-turn means pooled over
# every turn of every trajectory. The other columns read the same either way.
READINGS = {
    "per-trajectory": {},
    "pooled": {"append": "append_pooled", "gen": "gen_pooled"},
}


def table2_loss(stats: dict[str, float], row: Table2Row, reading: str = "per-trajectory") -> float:
    key = READINGS[reading]
    return float(
        sum(w * np.log(stats[key.get(k, k)] / getattr(row, k)) ** 2 for k, w in WEIGHTS.items())
    )


def fit_profile(
    row: Table2Row,
    n: int = 4000,
    seed: int = 0,
    iters: int = 300,
    start: TraceProfile | None = None,
    reading: str = "per-trajectory",
) -> TraceProfile:
    """Fit the five free parameters of a profile to `row` (common random numbers: fixed seed),
    its Append and Gen columns read as `reading` (READINGS)."""
    if start is None:
        start = TraceProfile(300.0, 120.0, 0.8, 6000.0, 200.0, first_cap=row.max_len // 4)

    def make(x: np.ndarray) -> TraceProfile:
        return dataclasses.replace(start, **dict(zip(FITTED, np.exp(x).tolist(), strict=True)))

    def loss(x: np.ndarray) -> float:
        return table2_loss(profile_stats(make(x), row.max_len, n, seed), row, reading)

    x0 = np.log([getattr(start, f) for f in FITTED])
    return make(nelder_mead(loss, x0, step=0.3, iters=iters))


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, step: float, iters: int
) -> np.ndarray:
    """Plain Nelder-Mead (reflect, expand, contract, shrink); no scipy in the image."""
    pts = [x0.astype(float)] + [x0 + step * e for e in np.eye(len(x0))]
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        xr = centre + (centre - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centre + 2 * (centre - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (pts[-1] - centre)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (x - pts[0]) for x in pts[1:]]
                vals = [vals[0]] + [f(x) for x in pts[1:]]
    return pts[int(np.argmin(vals))]
