"""report/history.py: the Redis event history checker."""

from __future__ import annotations

from dualpath.report.history import check_history


def test_history_checker_flags_duplicates_order_and_shrinking_prefixes() -> None:
    good = [
        {"kind": "turn_done", "rid": 1, "session": 9, "turn": 0},
        {"kind": "persisted", "session": 9, "prefix": 4},
        {"kind": "turn_done", "rid": 2, "session": 9, "turn": 1},
        {"kind": "persisted", "session": 9, "prefix": 6},
    ]
    assert check_history(good)["ok"] and check_history(good)["turns_done"] == 2
    assert not check_history([*good, good[0]])["ok"]  # a turn finished twice
    assert not check_history([*good, {"kind": "persisted", "session": 9, "prefix": 5}])["ok"]
    out_of_order = [good[2], good[0]]
    assert not check_history(out_of_order)["session_turns_in_order"]
