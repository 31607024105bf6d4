"""Traffic accounting helpers for links: bucketed time series of a piecewise-constant rate.

A link's aggregate rate is constant between fabric events, so accounting is exact: each
constant-rate segment is integrated once, when the rate is about to change, and its bytes are
spread uniformly over the fixed-width buckets the segment overlaps.
"""

from __future__ import annotations

import math
from array import array


def new_series(bucket_s: float | None) -> array[float] | None:
    if bucket_s is None:
        return None
    if not bucket_s > 0:
        raise ValueError(f"bucket_s must be > 0 (or None to disable series), got {bucket_s}")
    return array("d")


def spread(series: array[float], width: float, t0: float, t1: float, rate: float) -> None:
    """Add rate x overlap to every bucket that [t0, t1] overlaps (grows the array on demand)."""
    first = int(t0 / width)
    last = int(t1 / width)
    if last >= len(series):
        series.frombytes(bytes(8 * (last + 1 - len(series))))
    if first == last:  # the usual case: events are far denser than buckets
        series[first] += rate * (t1 - t0)
        return
    series[first] += rate * ((first + 1) * width - t0)
    for b in range(first + 1, last):
        series[b] += rate * width
    series[last] += rate * (t1 - last * width)


def series_until(
    series: array[float],
    width: float,
    wanted: float | None,
    open_segment: tuple[float, float, float] | None,
) -> list[float]:
    """Bytes per `wanted`-wide bucket from t=0 to the end of `open_segment` (t0, now, rate).

    `wanted` must be a whole multiple of the base `width` (None = the base width).
    """
    factor = bucket_factor(width, wanted)
    base = array("d", series)
    end = 0.0
    if open_segment is not None:
        t0, end, rate = open_segment
        if end > t0 and rate > 0.0:
            spread(base, width, t0, end, rate)
    n_base = max(len(base), math.ceil(end / width))
    values = [*base, *([0.0] * (n_base - len(base)))]
    return [math.fsum(values[i : i + factor]) for i in range(0, len(values), factor)]


def bucket_factor(base: float, wanted: float | None) -> int:
    """How many base buckets make one `wanted` bucket (must be a whole number)."""
    if wanted is None:
        return 1
    factor = round(wanted / base)
    if factor < 1 or abs(factor * base - wanted) > 1e-9 * wanted:
        raise ValueError(f"bucket_s {wanted} must be a whole multiple of the fabric's {base}")
    return factor
