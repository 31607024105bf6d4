"""Admission control: 429 once the waiting prefill work exceeds the delay bound."""

from __future__ import annotations

import pytest

from dualpath.serving.admission import Admission


def test_admits_until_the_waiting_work_exceeds_the_bound() -> None:
    a = Admission(prefill_tokens_per_s=1000.0, max_queue_delay_s=2.0)
    for _ in range(4):
        assert a.refusal() is None
        a.admitted(600)  # 2,400 tokens = 2.4 s of work after the fourth
    reason = a.refusal()
    assert reason is not None and "2.4 s of work" in reason and a.shed == 1
    a.prefilled(600)
    assert a.refusal() is None and a.queue_delay_s == pytest.approx(1.8)


def test_prefilled_never_goes_negative_and_bad_parameters_are_refused() -> None:
    a = Admission(10.0, 1.0)
    a.prefilled(5)
    assert a.waiting_tokens == 0
    with pytest.raises(ValueError, match="prefill rate"):
        Admission(0.0, 1.0)
    with pytest.raises(ValueError, match="max_queue_delay_s"):
        Admission(1.0, 0.0)
