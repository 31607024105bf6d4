"""From parsed trace sessions to a `Workload`: request slice, chain plan, script turns.

Loaders parse their format into `RawSession`s (unscaled seconds, the trace's own token
counts, scoped block ids); everything format-independent happens here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload
from dualpath.model.workload.traces.errors import TraceError, check_ids, check_scale
from dualpath.model.workload.traces.prefix import ChainPlanner, block_ratio


@dataclass(frozen=True, slots=True)
class RawTurn:
    t: float  # seconds since the session start, unscaled
    prompt: int  # >= 1
    gen: int  # as in the trace (>= 0)
    think: float  # seconds before this request in session replay, unscaled
    ids: tuple[int, ...]  # block ids, already scoped (see IdSpace)


@dataclass(frozen=True, slots=True)
class RawSession:
    key: str
    start: float  # seconds since the trace start, unscaled
    turns: tuple[RawTurn, ...]  # in time order, >= 1


class IdSpace:
    """Maps a trace's block ids to workload ids, one table per id scope.

    A "local" scope (one WEKA conversation) gets its own table, so two conversations never
    share an id; a "global" scope shares one. New ids are numbered densely in first-seen
    order; ids are type-checked when first seen, which checks every distinct value once
    instead of every one of the ~94 million occurrences. The mapped ints are shared objects,
    so the scripts' id tuples cost a pointer per block.
    """

    def __init__(self) -> None:
        self.shared: dict[Any, int] = {}
        self._next = 0

    def map(
        self,
        table: dict[Any, int],
        ids: list[Any],
        where: str,
        prev: tuple[list[Any], tuple[int, ...]] | None = None,
    ) -> tuple[int, ...]:
        """`ids` mapped through `table`. `prev` = (raw, mapped) of the previous request of
        the same conversation: when it is a prefix of `ids` (the usual next turn), only the
        rest is looked up, saving most of the work on a 2,000-block prompt."""
        k = 0
        if prev is not None and len(prev[0]) <= len(ids) and ids[: len(prev[0])] == prev[0]:
            k = len(prev[0])
        rest = ids[k:] if k else ids
        try:
            fresh = set(rest).difference(table)
        except TypeError:  # an unhashable element: a list or an object
            check_ids(rest, where)
            raise
        if fresh:
            check_ids(list(fresh), where)
            for x in sorted(fresh):  # sorted: numbering independent of set order
                table[x] = self._next
                self._next += 1
        tail = tuple(map(table.__getitem__, rest))
        return prev[1] + tail if k and prev is not None else tail


def first_requests(sessions: Sequence[RawSession], n: int) -> list[RawSession]:
    """The first n requests of the whole trace in arrival order (start + t; ties: session
    order, then turn order); sessions left without a request are dropped."""
    if type(n) is not int or n < 1:
        raise TraceError(f"requests: expected an integer >= 1, got {n!r}")
    order = sorted(
        (s.start + t.t, i, j) for i, s in enumerate(sessions) for j, t in enumerate(s.turns)
    )
    kept = [0] * len(sessions)
    for _, i, _ in order[:n]:
        kept[i] += 1  # a session's turns are in time order: the kept ones are a prefix
    return [
        RawSession(s.key, s.start, s.turns[:k]) for s, k in zip(sessions, kept, strict=True) if k
    ]


def assemble(
    source: str,
    sessions: Sequence[RawSession],
    *,
    block_tokens: int,
    emulator_block_tokens: int,
    time_scale: float,
    requests: int | None,
    chain_base: int,
    what: str,
) -> Workload:
    """Scripts of `sessions` (in the order given, which is also the chain plan's order)."""
    check_scale(time_scale)
    ratio = block_ratio(block_tokens, emulator_block_tokens)
    if requests is not None:
        sessions = first_requests(sessions, requests)
    planner = ChainPlanner(ratio, chain_base)
    scripts = []
    for s in sessions:
        turns: list[ScriptTurn] = []
        for i, r in enumerate(s.turns):
            gen = max(1, r.gen)  # the emulator generates at least the first token
            if i == 0:
                think, append = 0.0, r.prompt
            else:
                prev = turns[-1]
                # compaction (or a sub-agent turn merged in) shrinks the prompt: append mode
                # cannot express that, so it gets 1 token; `prompt` stays exact
                think, append = r.think * time_scale, max(1, r.prompt - prev.prompt - prev.gen)
            at = (s.start + r.t) * time_scale
            chain = planner.add(r.ids)
            turns.append(ScriptTurn(r.prompt, gen, think, at, chain, append, r.ids))
        scripts.append(AgentScript(s.key, s.start * time_scale, tuple(turns)))
    n_req = sum(len(s.turns) for s in scripts)
    sliced = "" if requests is None else f" (first {requests} in arrival order)"
    scale = "" if time_scale == 1 else f", time x{time_scale:g}"
    return Workload(
        source,
        tuple(scripts),
        tuple(planner.forks),
        block_tokens,
        f"{source}: {what}; {len(scripts)} sessions, {n_req} requests{sliced}{scale}",
    )
