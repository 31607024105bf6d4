"""The nemesis checker (Jepsen style): what the clients saw against what the cluster
recorded. Pure: the runner (runtimes/process/launcher/nemesis.py) gathers both.

A turn is *lost* when its client got no answer (a timeout, a dropped connection), never an
explicit success or error; *duplicated* when the history holds its completion twice, or a
completion its client was told had failed. Per-session order: the history's completions of
one session come in increasing turn order. Blocks: the cluster's own integrity counters,
and no block the storage acknowledged (a `persisted` event: that prefix of the session is
stored and in the index) missing from what it serves at the end (`stored`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ClientRecord:
    session: str
    seq: int  # the client's turn index within its session
    status: int  # HTTP status; 0: no answer at all (timeout, connection lost)
    rid: int | None  # the request id of a 200 answer
    error: str = ""


@dataclass
class Verdict:
    turns: int = 0
    completed: int = 0
    failed_explicitly: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    blocks_lost: int = 0
    blocks_corrupted: int = 0
    persisted_missing: list[str] = field(default_factory=list)  # acknowledged, not served

    @property
    def ok(self) -> bool:
        problems = self.lost or self.duplicated or self.out_of_order or self.persisted_missing
        return not problems and self.blocks_lost == 0 and self.blocks_corrupted == 0

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "turns": self.turns,
            "completed": self.completed,
            "failed_explicitly": self.failed_explicitly,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "out_of_order": len(self.out_of_order),
            "blocks_lost": self.blocks_lost,
            "blocks_corrupted": self.blocks_corrupted,
            "persisted_missing": len(self.persisted_missing),
            "examples": (self.lost + self.duplicated + self.out_of_order + self.persisted_missing)[
                :5
            ],
        }


def check(
    records: Iterable[ClientRecord],
    history: Iterable[dict[str, Any]],
    integrity: dict[str, Any],
    stored: Mapping[int, int] | None = None,
) -> Verdict:
    """`stored`: session -> the prefix the storage serves at the end (None: not checked)."""
    v = Verdict(
        blocks_lost=int(integrity.get("blocks_lost", 0)),
        blocks_corrupted=int(integrity.get("blocks_corrupted", 0)),
    )
    told_ok: dict[int, ClientRecord] = {}
    for r in records:
        v.turns += 1
        if r.status == 200 and r.rid is not None:
            v.completed += 1
            told_ok[r.rid] = r
        elif r.status == 0:
            v.lost.append(f"{r.session}#{r.seq}: no answer ({r.error})")
        else:
            v.failed_explicitly += 1
    history = list(history)  # read twice
    done = [e for e in history if e.get("kind") == "turn_done"]
    seen = Counter(int(e["rid"]) for e in done)
    for rid, n in seen.items():
        if n > 1:
            v.duplicated.append(f"turn {rid} completed {n} times in the history")
        elif rid not in told_ok:
            v.duplicated.append(f"turn {rid} completed but its client was told it failed")
    for rid, r in told_ok.items():
        if rid not in seen:
            v.lost.append(f"{r.session}#{r.seq}: told 200 (turn {rid}) but not in the history")
    by_session: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    for e in done:
        by_session[e["session"]].append((float(e["t"]), int(e["turn"])))
    for session, turns in by_session.items():
        order = [turn for _, turn in sorted(turns)]
        if order != sorted(order) or len(set(order)) != len(order):
            v.out_of_order.append(f"session {session}: turns completed in order {order}")
    if stored is not None:
        _check_persisted(v, history, stored)
    return v


def _check_persisted(
    v: Verdict, history: Iterable[dict[str, Any]], stored: Mapping[int, int]
) -> None:
    acked: dict[int, int] = {}
    for e in history:
        if e.get("kind") == "persisted":
            s = int(e["session"])
            acked[s] = max(acked.get(s, 0), int(e["prefix"]))
    for s, n in sorted(acked.items()):
        if stored.get(s, 0) < n:
            v.persisted_missing.append(
                f"session {s}: {n} blocks acknowledged, {stored.get(s, 0)} stored at the end"
            )
