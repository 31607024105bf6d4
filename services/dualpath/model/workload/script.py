"""What every runtime replays, whatever produced it: per-session scripts of turns.

A `Workload` is the common form of the synthetic Table 2 generator and of trace replay
(`dualpath.model.workload.traces`), built by
`dualpath.model.config.workload_sources.build_workload`. Each
`AgentScript` is one session; each `ScriptTurn` is one request with everything a runtime
needs to replay it either way:

- session replay: a session starts at `start_s`; turn i is sent `think_s` after turn i-1's
  last token (closed loop: a slow cluster delays the rest of the session);
- open-loop replay: turn i is sent at `at_s` whether or not earlier turns finished (what the
  trace's clock says, not what the cluster allows).

`chain` is the emulator's KV chain (the block store's "session") holding the prompt's
blocks; a trace's shared prefixes are declared as `Fork`s (blocks.chain), so two prompts with
equal leading block ids hit the same stored KV. Pure (no I/O): the Locust process imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

# One Fork type for the whole code base: the block store declares exactly these.
from dualpath.model.blocks.chain import Fork
from dualpath.model.workload.trajectory import Trajectory

__all__ = [
    "AgentScript",
    "Fork",
    "ScriptTurn",
    "Workload",
    "first_turns",
    "shift_starts",
    "synthetic_workload",
]


@dataclass(frozen=True, slots=True)
class ScriptTurn:
    """One request of a session (see the module doc for how runtimes use the times)."""

    prompt: int  # whole prompt tokens (>= 1)
    gen: int  # tokens to generate (>= 1; a trace's 0 becomes 1)
    think_s: float  # delay before this turn in session replay (0.0 for a session's first turn)
    at_s: float  # open-loop arrival since the workload start, s (time_scale already applied)
    chain: int  # emulator KV chain this prompt's blocks live on
    append: int  # new tokens vs the previous turn's prompt + gen in this session (>= 1)
    blocks: tuple[int, ...] = ()  # content ids at Workload.block_tokens (empty: private content)

    def __post_init__(self) -> None:
        if self.prompt < 1 or self.gen < 1 or self.append < 1:
            raise ValueError(f"ScriptTurn needs prompt, gen and append >= 1: {self._short()}")
        # chained comparisons, not _time_ok: this runs once per request of a workload
        # (5.2 M at paper scale), and NaN fails them as it fails isfinite
        if not (0.0 <= self.think_s < _INF and 0.0 <= self.at_s < _INF) or self.chain < 0:
            raise ValueError(
                f"ScriptTurn needs finite think_s, at_s >= 0 and chain >= 0: {self._short()}"
            )

    def _short(self) -> str:
        return (
            f"prompt={self.prompt} gen={self.gen} think_s={self.think_s} at_s={self.at_s} "
            f"chain={self.chain} append={self.append} ({len(self.blocks)} blocks)"
        )


@dataclass(frozen=True, slots=True)
class AgentScript:
    """One session: its key, when it starts, and its turns in order."""

    key: str  # unique in the workload, e.g. "agent-7" or "trace_0002"
    start_s: float  # session start (open loop / trace order), seconds
    turns: tuple[ScriptTurn, ...]

    def __post_init__(self) -> None:
        if not self.key or not self.turns or not _time_ok(self.start_s):
            raise ValueError(
                f"AgentScript needs a key, >= 1 turn and a finite start_s >= 0: "
                f"key={self.key!r} start_s={self.start_s} turns={len(self.turns)}"
            )


@dataclass(frozen=True, slots=True, weakref_slot=True)  # sources.py: alive workloads
class Workload:
    """Every session of a run, the chains' shared prefixes, and what was loaded."""

    source: str  # "synthetic", "weka", "mooncake", ...
    scripts: tuple[AgentScript, ...]
    forks: tuple[Fork, ...]  # every fork, parents before children
    block_tokens: int  # granularity of ScriptTurn.blocks ids (trace block size; 0: no ids)
    description: str  # one line: what was loaded (file, sessions, requests, slice)

    def __post_init__(self) -> None:
        if self.block_tokens < 0:
            raise ValueError(f"Workload block_tokens must be >= 0, got {self.block_tokens}")
        keys = {s.key for s in self.scripts}
        if len(keys) != len(self.scripts):
            raise ValueError(f"Workload {self.source}: session keys must be unique")

    @property
    def requests(self) -> int:
        """Turns over all sessions."""
        return sum(len(s.turns) for s in self.scripts)


def synthetic_workload(trajs: Sequence[Trajectory], think_s: float) -> Workload:
    """Synthetic trajectories as scripts: chain = agent id, all start at 0, no shared prefix.

    `think_s` applies before every turn but a session's first (the tool-call time).
    """
    scripts = []
    for traj in trajs:
        turns, context = [], 0
        for i, t in enumerate(traj.turns):
            prompt = context + t.append
            turns.append(
                ScriptTurn(prompt, t.gen, think_s if i else 0.0, 0.0, traj.agent_id, t.append)
            )
            context = prompt + t.gen
        scripts.append(AgentScript(f"agent-{traj.agent_id}", 0.0, tuple(turns)))
    return Workload(
        "synthetic",
        tuple(scripts),
        (),
        0,
        f"synthetic: {len(scripts)} agents, {sum(len(s.turns) for s in scripts)} turns",
    )


def shift_starts(workload: Workload, starts: Sequence[float]) -> Workload:
    """Session i started at starts[i] instead (e.g. Poisson session starts for a trace that,
    like WEKA's, has no global clock): start_s and every at_s move by the same amount."""
    if len(starts) != len(workload.scripts):
        raise ValueError(f"need {len(workload.scripts)} starts, got {len(starts)}")
    scripts = []
    for s, start in zip(workload.scripts, starts, strict=True):
        d = start - s.start_s
        turns = tuple(replace(t, at_s=max(0.0, t.at_s + d)) for t in s.turns)
        scripts.append(AgentScript(s.key, start, turns))
    return replace(workload, scripts=tuple(scripts))


def first_turns(workload: Workload, n: int) -> Workload:
    """Each session cut to its first `n` turns (a slice of long traces; forks of the chains
    no kept turn uses stay declared: harmless, they name content nobody reads)."""
    scripts = tuple(replace(s, turns=s.turns[:n]) for s in workload.scripts)
    kept = sum(len(s.turns) for s in scripts)
    return replace(
        workload,
        scripts=scripts,
        description=f"{workload.description}; first {n} turns each ({kept} requests)",
    )


def mean_shape(scripts: Sequence[AgentScript]) -> tuple[int, int]:
    """Mean prompt context and mean append per request: the shape β is profiled at (every
    runtime derives the scheduler's limits from it, so they agree)."""
    n = ctx_sum = app_sum = 0
    for script in scripts:
        for turn in script.turns:
            append = min(turn.append, turn.prompt)
            ctx_sum += turn.prompt - append
            app_sum += append
            n += 1
    return (ctx_sum // max(1, n), app_sum // max(1, n))


_INF: Final = math.inf


def _time_ok(x: float) -> bool:
    return math.isfinite(x) and x >= 0
