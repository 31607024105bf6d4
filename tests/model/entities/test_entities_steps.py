"""A decode chunk's step figures in one call equal the per-figure `Hist.add` calls, float
sums included, to the last bit (the decode unit relies on it: reports stay identical)."""

from __future__ import annotations

import random
from bisect import bisect_left

from dualpath.model.entities.steps import INTER_TOKEN_LATENCY, ITERATION_TOKENS, EngineSteps


def _one_by_one(
    got: EngineSteps, n: int, steps: int, gap: float, gap_count: int, step: float
) -> None:
    got.iteration_tokens.add(n, steps)
    got.inter_token.add(gap, gap_count)
    got.inter_token.add(step, n * (steps - 1))


def test_a_chunk_in_one_call_equals_the_adds_one_by_one() -> None:
    rng = random.Random(7)
    slow, fast = EngineSteps(), EngineSteps()
    for _ in range(5000):
        n, steps = rng.randint(1, 300), rng.randint(1, 16)
        fresh = rng.randint(0, n)
        gap, step = rng.uniform(0.0, 0.3), rng.uniform(0.005, 0.2)
        # a fresh request's own gap first, as the decode unit records it
        first = rng.uniform(0.0, 2.0)
        slow.inter_token.add(first)
        fast.inter_token.add(first)
        _one_by_one(slow, n, steps, gap, n - fresh, step)
        fast.add_decode_chunk(
            n,
            steps,
            gap,
            n - fresh,
            bisect_left(INTER_TOKEN_LATENCY, gap),
            step,
            bisect_left(INTER_TOKEN_LATENCY, step),
            bisect_left(ITERATION_TOKENS, n),
        )
    for a, b in (
        (slow.iteration_tokens, fast.iteration_tokens),
        (slow.inter_token, fast.inter_token),
    ):
        assert a.counts == b.counts
        assert a.n == b.n
        assert a.total.hex() == b.total.hex()
    assert slow.inter_token.n > 0 and slow.inter_token.total > 0


def test_nothing_is_counted_for_a_one_step_chunk_of_fresh_requests() -> None:
    got = EngineSteps()
    got.add_decode_chunk(4, 1, 0.02, 0, 1, 0.03, 2, 1)
    assert got.inter_token.n == 0 and got.inter_token.total == 0.0
    assert got.iteration_tokens.n == 1 and got.iteration_tokens.total == 4.0


def test_counts_held_in_runs_equal_counts_added_at_once_whenever_read() -> None:
    """`add_run` keeps two buckets' counts aside; reading `counts` (or `cumulative`) at any
    point, between runs of one, two or many buckets, sees every count added so far."""
    rng = random.Random(11)
    held = EngineSteps().inter_token
    plain = [0] * (len(INTER_TOKEN_LATENCY) + 1)
    for i in range(4000):
        width = (1, 2, 3, len(plain))[i // 1000]  # how many buckets recur
        bucket, count = rng.randrange(width), rng.randint(1, 5000)
        if rng.random() < 0.1:  # the one-value path between runs
            value = rng.uniform(0.0, 100.0)
            held.add(value)
            plain[bisect_left(INTER_TOKEN_LATENCY, value)] += 1
        else:
            held.add_run(bucket, count)
            plain[bucket] += count
        if rng.random() < 0.05:
            assert held.counts == plain
            assert held.cumulative()[-1][1] == sum(plain)
    assert held.counts == plain
