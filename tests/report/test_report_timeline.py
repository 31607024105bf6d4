"""report/timeline.py: the run over time (paper Fig. 15) from the request records."""

from __future__ import annotations

import random

from dualpath.model.entities.metrics import RequestLog, RequestRecord
from dualpath.report.timeline import timeline


def _rec(session: int, arrival: float, first: float, last: float, prompt: int) -> RequestRecord:
    return RequestRecord(session, 0, prompt, 0, 1, "pe", arrival, first, first, last)


def test_windows_hold_prompt_rate_arrivals_ttft_and_live_sessions() -> None:
    reqs = [
        _rec(1, 0.0, 2.0, 5.0, 1000),  # session 1: windows 0..1
        _rec(1, 12.0, 13.0, 14.0, 3000),
        _rec(2, 1.0, 25.0, 31.0, 500),  # session 2: windows 0..3, its turn waits 24 s
    ]
    tl = timeline(reqs, window_s=10.0)
    assert tl["windows"] == 4  # the last token at 31 s
    assert tl["prompt_tps"] == [100.0, 300.0, 50.0, 0.0]  # first tokens at 2, 13 and 25 s
    assert tl["ttft_mean_s"] == [13.0, 1.0, None, None]  # arrivals: (2 + 24) / 2, then 1
    assert tl["running_agents"] == [2, 2, 1, 1]


def test_windows_start_at_the_first_arrival() -> None:
    """The process runtime's clock does not start at 0: windows follow the first arrival."""
    tl = timeline([_rec(7, 1000.0, 1001.0, 1015.0, 10)], window_s=10.0)
    assert tl["windows"] == 2 and tl["prompt_tps"] == [1.0, 0.0]
    assert tl["running_agents"] == [1, 1]


def test_no_turn_finished_gives_empty_series() -> None:
    tl = timeline([])
    assert tl["windows"] == 0 and tl["prompt_tps"] == [] and tl["running_agents"] == []


def test_live_sessions_match_a_per_session_count_from_a_log_or_a_list() -> None:
    """Sessions interleaved, turns out of order: each is alive from the window of its first
    arrival to the window of its last token, whichever form the records come in."""
    rng = random.Random(7)
    reqs = []
    for _ in range(300):
        arrival = rng.uniform(0.0, 500.0)
        first = arrival + rng.uniform(0.0, 20.0)
        reqs.append(_rec(rng.randrange(23), arrival, first, first + rng.uniform(0.0, 60.0), 10))
    rng.shuffle(reqs)
    tl = timeline(reqs, window_s=10.0)
    assert timeline(RequestLog(reqs), window_s=10.0) == tl
    origin, n = min(r.arrival for r in reqs), int(tl["windows"])

    def window(t: float) -> int:
        return min(max(int((t - origin) // 10.0), 0), n - 1)

    alive = [0] * n
    for s in {r.session for r in reqs}:
        own = [r for r in reqs if r.session == s]
        for w in range(window(min(r.arrival for r in own)), window(max(r.t_last for r in own)) + 1):
            alive[w] += 1
    assert tl["running_agents"] == alive
