"""runtimes/process/serving/admission.py: 429 once the oldest admitted turn has waited past the
bound."""

from __future__ import annotations

import pytest

from dualpath.runtimes.process.serving.admission import Admission


def test_sheds_while_the_oldest_waiting_turn_is_older_than_the_bound() -> None:
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=2.0)
    a.admitted(1)
    t[0] = 1.0
    a.admitted(2)
    assert a.refusal() is None
    t[0] = 2.5  # turn 1 has waited 2.5 s
    reason = a.refusal()
    assert reason is not None and "oldest 2.5 s" in reason and a.shed == 1
    a.prefilled(1)  # turn 2 (waited 1.5 s) is now the oldest
    assert a.refusal() is None and a.queue_delay_s == pytest.approx(1.5)
    a.prefilled(2)
    a.prefilled(2)  # idempotent
    assert a.waiting == 0 and a.queue_delay_s == 0.0


def test_bad_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_queue_delay_s"):
        Admission(lambda: 0.0, 0.0)


def test_sheds_when_the_measured_prefill_rate_cannot_clear_the_queue_in_time() -> None:
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=2.0, window_s=10.0, min_waiting=2, min_ends=4)
    a.admitted(0)  # one busy spell from t = 0: a turn always waits, none for long
    for rid in range(4):  # one prefill ends per second
        t[0] += 0.9
        a.admitted(rid + 1)
        t[0] += 0.1
        a.prefilled(rid)
    assert a.refusal() is None  # one waiting
    for rid in range(10, 13):  # four waiting, 4 ends in the spell's 4 s: ≈4.0 s
        a.admitted(rid)
    assert a.queue_delay_s == pytest.approx(0.1)
    reason = a.refusal()
    assert reason is not None and "≈4.0 s" in reason
    a.prefilled(4)
    a.prefilled(10)
    assert a.refusal() is None  # two waiting, 6 ends in 4 s: ≈1.3 s


def test_a_few_waiting_turns_leave_the_decision_to_the_measured_age() -> None:
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=2.0, min_waiting=32)
    a.admitted(1)
    t[0] = 0.5
    a.prefilled(1)  # one end: a rate of 1 per second at best
    for rid in range(2, 12):  # ten waiting would be "10 s" by that rate
        a.admitted(rid)
    assert a.expected_wait_s == 0.0 and a.refusal() is None


def test_a_burst_is_not_refused_on_the_rate_of_its_first_few_ends() -> None:
    """Every agent's first turn at once (the bench's start-up): the first ends are too few
    to trust, then their rate is over the 0.1 s they took, not over a 1 s floor; a rate
    that stays too low for the queue is still shed."""
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=8.0)
    for rid in range(256):
        a.admitted(rid)
    t[0] = 0.1
    a.prefilled(0)
    a.prefilled(1)
    assert a.min_ends > 2 and a.expected_wait_s == 0.0 and a.refusal() is None  # too few
    for rid in range(2, 18):  # 18 ends in 0.1 s, 238 waiting: ≈1.3 s
        a.prefilled(rid)
    assert a.expected_wait_s == pytest.approx(238 / 180) and a.refusal() is None
    t[0] = 1.0  # no more ends: 18 in the spell's 1 s
    reason = a.refusal()
    assert reason is not None and "≈13.2 s" in reason and "oldest 1.0 s" in reason


def test_a_new_busy_spell_does_not_inherit_the_last_ones_rate() -> None:
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=8.0, min_waiting=2, min_ends=2)
    for rid in range(4):
        a.admitted(rid)
    t[0] = 4.0
    for rid in range(4):  # 4 ends over 4 s, then the queue is empty
        a.prefilled(rid)
    t[0] = 5.0
    for rid in range(10, 60):  # a burst: 50 waiting, no end yet in this spell
        a.admitted(rid)
    assert a.expected_wait_s == 0.0 and a.refusal() is None
