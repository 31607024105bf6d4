"""Invariant checks over a run's event history (the msgpack records services append to the
run's Redis stream): a checker reads the history afterwards, Jepsen-style."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_history(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Every turn finished exactly once, a session's turns finish in order, and a session's
    stored prefix only grows (persists never go backwards)."""
    done: set[int] = set()
    duplicates = 0
    last_turn: dict[int, int] = {}
    turn_order_ok = True
    stored: dict[int, int] = {}
    persist_ok = True
    counts: dict[str, int] = {}
    for ev in events:
        kind = ev["kind"]
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "turn_done":
            rid, session, turn = int(ev["rid"]), int(ev["session"]), int(ev["turn"])
            duplicates += rid in done
            done.add(rid)
            turn_order_ok &= turn > last_turn.get(session, -1)
            last_turn[session] = turn
        elif kind == "persisted":
            session, prefix = int(ev["session"]), int(ev["prefix"])
            persist_ok &= prefix >= stored.get(session, 0)
            stored[session] = prefix
    return {
        "records": sum(counts.values()),
        "by_kind": counts,
        "turns_done": len(done),
        "duplicate_turns": duplicates,
        "session_turns_in_order": turn_order_ok,
        "stored_prefix_monotone": persist_ok,
        "ok": duplicates == 0 and turn_order_ok and persist_ok,
    }
