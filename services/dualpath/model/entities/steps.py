"""Per-engine step statistics in vLLM's histogram shapes (docs/monitoring.md, vLLM parity).

The engines record them as they step; the process runtime exports them as
`vllm:iteration_tokens_total` and `vllm:inter_token_latency_seconds`. Bucket bounds are
vLLM's defaults (vllm/v1/metrics/buckets.py, vLLM 0.33.0), so dashboards built for vLLM
read ours unchanged. A decode chunk runs many identical steps as one event, so a value is
added with a count instead of once per step.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# vLLM 0.33.0, vllm/v1/metrics/buckets.py
REQUEST_LATENCY = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TIME_TO_FIRST_TOKEN = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
INTER_TOKEN_LATENCY = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def one_two_five(max_value: int) -> tuple[float, ...]:
    """vLLM's `build_1_2_5_buckets` (token-count histograms, capped at max_model_len)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(float(m * scale))
        scale *= 10


class Hist:
    """A Prometheus-style histogram that takes a value with a count."""

    __slots__ = ("_b0", "_b1", "_counts", "_n0", "_n1", "bounds", "n", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket, +Inf last; not cumulative
        self.total = 0.0
        self.n = 0
        # Two buckets' counts not yet in `_counts`, held in native ints (`add_run`): a
        # count above 256 in a list is a boxed int that every `+=` allocates anew, and the
        # decode unit adds to the same two or three buckets chunk after chunk. Counts are
        # integers, so adding them later or in another order gives the same histogram.
        self._b0 = -1
        self._n0 = 0
        self._b1 = -1
        self._n1 = 0

    def __repr__(self) -> str:
        return f"Hist(n={self.n}, total={self.total!r}, counts={self.counts})"

    @property
    def counts(self) -> list[int]:
        """Per bucket, +Inf last; not cumulative."""
        self._settle()
        return self._counts

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0:
            return
        # `le` is inclusive: the first bucket whose bound is >= value
        self._counts[bisect_left(self.bounds, value)] += count
        self.total += value * count
        self.n += count

    def add_run(self, bucket: int, count: int) -> None:
        """`count` more in `bucket`, kept in a native int while the bucket recurs (the
        caller keeps `total` and `n`). The two most recent buckets are held."""
        if bucket == self._b0:
            self._n0 += count
        elif bucket == self._b1:
            self._n1 += count
        else:
            if self._b1 >= 0:
                self._counts[self._b1] += self._n1
            self._b1, self._n1 = self._b0, self._n0
            self._b0, self._n0 = bucket, count

    def _settle(self) -> None:
        counts = self._counts
        if self._b0 >= 0:
            counts[self._b0] += self._n0
            self._b0, self._n0 = -1, 0
        if self._b1 >= 0:
            counts[self._b1] += self._n1
            self._b1, self._n1 = -1, 0

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it), +Inf last, as the exposition format wants."""
        out, acc = [], 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append((bound, acc))
        return out


@dataclass(slots=True)
class EngineSteps:
    """What one engine's steps did: tokens per step, gaps between a request's tokens, and
    preemptions (always 0: a turn is placed on a DE only if its whole final length fits in
    the DE's free HBM, `model/policies/base.py`, so no engine ever evicts a running request)."""

    iteration_tokens: Hist = field(default_factory=lambda: Hist(ITERATION_TOKENS))
    inter_token: Hist = field(default_factory=lambda: Hist(INTER_TOKEN_LATENCY))
    preemptions: int = 0

    def add_decode_chunk(
        self, batch: int, steps: int, gap: float, gap_count: int, gap_bucket: int, step: float,
        step_bucket: int, batch_bucket: int,
    ) -> None:  # fmt: skip
        """One decode chunk of `steps` steps of `batch` requests in one call (the decode unit
        makes it per engine per chunk): the same additions, in the same order, as
        `iteration_tokens.add(batch, steps)`, `inter_token.add(gap, gap_count)` and
        `inter_token.add(step, batch * (steps - 1))`, so the float sums are the same to the
        last bit. The buckets come from the caller: the inter-token ones
        (`INTER_TOKEN_LATENCY`) found once per chunk for all its engines, the batch's
        (`ITERATION_TOKENS`) once per batch size."""
        # (`add_run`'s usual cases, a bucket whose run is held, written out: in pure
        # Python a call per figure per engine per chunk cost more than the addition.)
        it = self.iteration_tokens
        if steps > 0:
            if batch_bucket == it._b0:
                it._n0 += steps
            else:
                it.add_run(batch_bucket, steps)
            it.total += batch * steps
            it.n += steps
        itl = self.inter_token
        if gap_count > 0:
            if gap_bucket == itl._b0:
                itl._n0 += gap_count
            elif gap_bucket == itl._b1:
                itl._n1 += gap_count
            else:
                itl.add_run(gap_bucket, gap_count)
            itl.total += gap * gap_count
            itl.n += gap_count
        step_count = batch * (steps - 1)
        if step_count > 0:
            if step_bucket == itl._b0:
                itl._n0 += step_count
            elif step_bucket == itl._b1:
                itl._n1 += step_count
            else:
                itl.add_run(step_bucket, step_count)
            itl.total += step * step_count
            itl.n += step_count
