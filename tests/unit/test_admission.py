"""Admission control: 429 once the oldest admitted turn has waited past the bound."""

from __future__ import annotations

import pytest

from dualpath.serving.admission import Admission


def test_sheds_while_the_oldest_waiting_turn_is_older_than_the_bound() -> None:
    t = [0.0]
    a = Admission(lambda: t[0], max_queue_delay_s=2.0)
    a.admitted(1)
    t[0] = 1.0
    a.admitted(2)
    assert a.refusal() is None
    t[0] = 2.5  # turn 1 has waited 2.5 s
    reason = a.refusal()
    assert reason is not None and "2.5 s" in reason and "2 admitted" in reason and a.shed == 1
    a.prefilled(1)  # turn 2 (waited 1.5 s) is now the oldest
    assert a.refusal() is None and a.queue_delay_s == pytest.approx(1.5)
    a.prefilled(2)
    a.prefilled(2)  # idempotent
    assert a.waiting == 0 and a.queue_delay_s == 0.0


def test_bad_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_queue_delay_s"):
        Admission(lambda: 0.0, 0.0)
