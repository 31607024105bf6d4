"""The token bucket and its strict VL priority (model/links/token_bucket.py): exact arithmetic
(rates and sizes are powers of two, so every float below is exact), priority order, and
the fluid rate as the limit of a one-frame burst."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dualpath.model.links.token_bucket import PriorityBuckets, TokenBucket, schedule

MTU = 4096.0
RATE = 2.0**20  # bytes/s: a 4 KiB frame every 1/256 s
KV, MODEL = 2, 0  # the paper's CNIC: model traffic on the high table, KV on the low one


def link(burst: float = MTU, rate: float = RATE) -> PriorityBuckets:
    return PriorityBuckets(TokenBucket(rate, burst), high_vls={0, 1, 3})


def test_a_full_bucket_sends_at_once_then_waits_exactly_for_the_missing_tokens() -> None:
    b = TokenBucket(rate=1024.0, burst=4096.0)
    assert b.delay(4096.0, 0.0) == 0.0
    b.take(3072.0, 0.0)
    assert b.level(0.0) == 1024.0
    assert b.delay(2048.0, 0.0) == 1.0  # 1024 missing at 1024 B/s
    assert b.level(0.5) == 1536.0
    assert b.level(100.0) == 4096.0  # capped at the burst


def test_a_send_larger_than_the_burst_waits_for_a_full_bucket_and_leaves_a_debt() -> None:
    b = TokenBucket(rate=1024.0, burst=4096.0)
    b.take(1024.0, 0.0)
    assert b.delay(1 << 20, 0.0) == 1.0  # a full bucket (4096), not 1 MiB of tokens
    b.take(1 << 20, 1.0)
    assert b.level(1.0) == 4096.0 - (1 << 20)
    assert b.delay(1.0, 1.0) == ((1 << 20) - 4096.0 + 1.0) / 1024.0  # the debt is repaid first


def test_invalid_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(0.0, 1.0)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(1.0, math.inf)


def test_one_frame_burst_gives_the_fluid_completion_times_exactly() -> None:
    """Backlogged frames: frame k starts at (k-1)·MTU/r, so on a wire of rate r it ends at
    k·MTU/r, when the fluid link has moved k·MTU bytes; the rate is r for every k."""
    n = 1000
    starts = schedule([(0.0, KV, MTU)] * n, link())
    assert starts == [k * MTU / RATE for k in range(n)]
    ends = [s + MTU / RATE for s in starts]
    assert all(e == (k + 1) * MTU / RATE for k, e in enumerate(ends))
    assert n * MTU / ends[-1] == RATE


@pytest.mark.parametrize("frames", [1, 10, 100, 10_000])
def test_a_bigger_burst_runs_ahead_by_at_most_the_burst_so_the_rate_tends_to_r(frames: int) -> None:
    burst = 64 * MTU
    starts = schedule([(0.0, KV, MTU)] * frames, link(burst))
    for k, s in enumerate(starts):  # bytes started by s: (k+1)·MTU <= burst + r·s
        assert (k + 1) * MTU <= burst + RATE * s
        assert s == max(0.0, ((k + 1) * MTU - burst) / RATE)
    rate = frames * MTU / (starts[-1] + MTU / RATE)  # the last frame ends at line rate
    assert rate == RATE * frames * MTU / max(MTU, frames * MTU - burst + MTU)
    if frames == 10_000:
        assert rate / RATE - 1 < 0.0065  # the head start of one burst, spread over the run


def test_a_high_vl_send_overtakes_every_queued_low_send() -> None:
    """Eight KV frames queued at t=0; a model frame arriving at 1/512 s starts at the next
    frame boundary (1/256 s), ahead of the seven KV frames still waiting."""
    sends = [(0.0, KV, MTU)] * 8 + [(1 / 512, MODEL, MTU)]
    starts = schedule(sends, link())
    assert starts[-1] == 1 / 256
    assert starts[:8] == [0.0] + [(k + 1) / 256 for k in range(1, 8)]


def test_low_vl_sends_yield_while_high_vl_sends_wait_and_resume_in_order() -> None:
    sends = [(0.0, KV, MTU), (0.0, KV, MTU), (0.0, MODEL, MTU), (0.0, MODEL, MTU)]
    starts = schedule(sends, link())
    # both high frames first (FIFO among them), then the low ones in arrival order
    assert starts == [2 / 256, 3 / 256, 0.0, 1 / 256]


def test_high_vl_delay_is_bounded_by_one_low_frame_under_saturating_low_load() -> None:
    """A low VL saturates the link with frames of F bytes; a high transfer of S bytes
    (frames of MTU) ends within (S + F)/r of its arrival, however long the low backlog."""
    big = 16 * MTU
    lk = link(burst=big)
    low = [(0.0, KV, big)] * 200
    high_s = 32 * MTU
    arrival = 37.5 * big / RATE  # mid-way through a low frame's refill
    high = [(arrival + 0.0, MODEL, MTU)] * 32
    starts = schedule(low + high, lk)
    end = max(starts[200:]) + MTU / RATE
    assert end - arrival <= (high_s + big) / RATE
    fifo = schedule(low + [(arrival, KV, MTU)] * 32, link(burst=big))
    assert max(fifo[200:]) - arrival > 100 * big / RATE  # without priority: the whole backlog


def test_grant_must_serve_the_head_and_cancel_removes_a_waiter() -> None:
    lk = link()
    a = lk.enqueue(KV, MTU)
    b = lk.enqueue(MODEL, MTU)
    with pytest.raises(ValueError, match="head"):
        lk.grant(a, 0.0)
    lk.cancel(b)
    assert lk.next_start(0.0) == (a, 0.0)
    lk.grant(a, 0.0)
    assert lk.waiting() == 0 and lk.next_start(0.0) is None


@given(
    st.lists(
        st.tuples(
            st.integers(0, 1000).map(lambda t: t / 256),
            st.sampled_from([MODEL, KV]),
            st.integers(1, 64).map(lambda f: f * 1024.0),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(4, 64).map(lambda f: f * 1024.0),
)
def test_conformance_no_window_carries_more_than_burst_plus_rate_plus_one_send(
    sends: list[tuple[float, int, float]], burst: float
) -> None:
    starts = schedule(sends, link(burst))
    assert all(s >= a for s, (a, _, _) in zip(starts, sends, strict=True))
    events = sorted(zip(starts, (n for _, _, n in sends), strict=True))
    biggest = max(n for _, _, n in sends)
    for i in range(len(events)):
        moved = 0.0
        for j in range(i, len(events)):
            moved += events[j][1]
            window = events[j][0] - events[i][0]
            assert moved <= burst + RATE * window + biggest + 1e-6
