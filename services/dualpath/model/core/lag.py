"""Emulation lag: how late (emulated seconds) each timed wake-up of a real-time run ran.

Every sample of the whole run counts, in bounded memory: samples go to logarithmic buckets
(DDSketch's mapping, Masson et al., VLDB 2019), bucket i holding (GAMMA**(i-1), GAMMA**i].
A quantile is its bucket's midpoint 2 * GAMMA**i / (GAMMA + 1), which is within REL_ERROR
(1 %) of every value in the bucket: so the reported p50/p99 is within 1 % of the exact
sample at that rank, however many samples there were. Lags up to MIN_LAG_S count as 0
(exact); the maximum is kept exactly. Memory: one counter per bucket in use, at most
log(max / MIN_LAG_S) / log(GAMMA) ~ 1,400 for lags from 1 ns to 1,000 s.

The same meter counts samples into fixed EXPORT_BOUNDS for the Prometheus histogram
(`dualpath_emulation_lag_seconds_bucket{le=...}`, runtimes/process/serving/prom.py).
"""

from __future__ import annotations

import bisect
import math

REL_ERROR = 0.01
GAMMA = (1 + REL_ERROR) / (1 - REL_ERROR)
_LOG_GAMMA = math.log(GAMMA)
MIN_LAG_S = 1e-9  # at or below: on time (a wake-up a nanosecond late is not late)
# Prometheus bucket bounds (seconds, 1-2-5 per decade): from well under a timer's jitter
# to a host that cannot keep pace at all.
EXPORT_BOUNDS = (
    1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip


class LagMeter:
    """Records how late (emulated seconds) each timed wake-up happened."""

    def __init__(self) -> None:
        self._bins: dict[int, int] = {}  # bucket index -> samples
        self._zeros = 0
        self._export = [0] * (len(EXPORT_BOUNDS) + 1)  # per bound, then above the last
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def record(self, lag: float) -> None:
        self.count += 1
        self.sum += lag
        self.max = max(self.max, lag)
        self._export[bisect.bisect_left(EXPORT_BOUNDS, lag)] += 1  # `le`: lag <= bound
        if lag <= MIN_LAG_S:
            self._zeros += 1
            return
        i = math.ceil(math.log(lag) / _LOG_GAMMA)
        self._bins[i] = self._bins.get(i, 0) + 1

    @property
    def buckets_in_use(self) -> int:
        return len(self._bins)

    def quantile(self, q: float) -> float:
        """The sample of rank int(q * count) (0-based) in sorted order, within REL_ERROR;
        0.0 without samples; q = 1 is the exact maximum."""
        if not self.count:
            return 0.0
        rank = min(self.count - 1, int(q * self.count))
        if rank == self.count - 1:
            return self.max
        seen = self._zeros
        if rank < seen:
            return 0.0
        for i in sorted(self._bins):
            seen += self._bins[i]
            if rank < seen:
                return min(self.max, 2 * GAMMA**i / (GAMMA + 1))
        return self.max

    def buckets(self) -> list[tuple[float, int]]:
        """Cumulative (upper bound, samples <= it) over EXPORT_BOUNDS, then (inf, count)."""
        out: list[tuple[float, int]] = []
        seen = 0
        for bound, n in zip((*EXPORT_BOUNDS, math.inf), self._export, strict=True):
            seen += n
            out.append((bound, seen))
        return out


def bucket_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The q-quantile of cumulative histogram `buckets` [(le, count), ..., (inf, total)],
    interpolated linearly within its bucket as Prometheus' histogram_quantile does (from 0
    in the first bucket; the last finite bound when it falls above it). 0.0 when empty."""
    if not buckets or buckets[-1][1] <= 0:
        return 0.0
    rank = q * buckets[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > lo_count:
            if math.isinf(bound):
                return lo_bound
            return lo_bound + (bound - lo_bound) * (rank - lo_count) / (count - lo_count)
        lo_bound, lo_count = bound, count
    return lo_bound
