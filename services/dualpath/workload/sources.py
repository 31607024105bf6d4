"""Workload sources by name: what `workload.source` selects, for every runtime.

"synthetic" is the Table 2 generator (`workload.agents`, `max_len`, scales, `seed`);
"weka" and "mooncake" replay the trace at `workload.trace` (docs/traces.md). Both runtimes
and the Locust load generator call `build_workload`, so they replay the same scripts.
Pure (no asyncio): the Locust process imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dualpath.workload.script import Workload, first_turns, synthetic_workload
from dualpath.workload.synthetic import synthetic_trajectories
from dualpath.workload.table2 import parse_max_len
from dualpath.workload.traces.registry import load_trace

if TYPE_CHECKING:  # settings validates source names against this module: no import cycle
    from dualpath.config.settings import Scenario


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    name: str
    needs_trace: bool  # `workload.trace` must name a file or folder
    build: Callable[[Scenario, int | None], Workload]
    help: str


def _synthetic(sc: Scenario, n_agents: int | None) -> Workload:
    w = sc.workload
    trajs = synthetic_trajectories(
        parse_max_len(w.max_len), n_agents or w.agents, sc.seed, w.append_scale, w.gen_scale
    )
    # offline runs have no tool time (paper §7.3); online agents think between turns (§7.4)
    think = sc.online.think_time_s if w.mode == "online" else 0.0
    return synthetic_workload(trajs, think)


def _trace(fmt: str) -> Callable[[Scenario, int | None], Workload]:
    def build(sc: Scenario, n_agents: int | None) -> Workload:
        w = sc.workload
        if w.trace is None:  # settings reject this too; a direct caller gets the same words
            raise ValueError(f"workload.source={fmt} needs workload.trace (a file or folder)")
        sessions = w.trace_sessions
        if n_agents is not None:
            sessions = n_agents if sessions is None else min(sessions, n_agents)
        workload = load_trace(
            w.trace,
            fmt,
            sessions=sessions,
            requests=w.trace_requests,
            time_scale=w.time_scale,
            subagents=w.subagents,
            emulator_block_tokens=sc.engine.block_tokens,
        )
        return workload if w.trace_turns is None else first_turns(workload, w.trace_turns)

    return build


WORKLOAD_SOURCES: dict[str, WorkloadSource] = {
    s.name: s
    for s in (
        WorkloadSource(
            "synthetic", False, _synthetic, "paper Table 2 trajectories (agents, max_len)"
        ),
        WorkloadSource("weka", True, _trace("weka"), "WEKA Claude Code sessions (folder)"),
        WorkloadSource("mooncake", True, _trace("mooncake"), "Mooncake JSONL trace"),
    )
}


def known_sources() -> str:
    return ", ".join(WORKLOAD_SOURCES)


def build_workload(sc: Scenario, n_agents: int | None = None) -> Workload:
    """The scenario's scripts. `n_agents`: synthetic, how many agents (default
    `workload.agents`); a trace, at most that many sessions (with `trace_sessions`)."""
    src = WORKLOAD_SOURCES.get(sc.workload.source)
    if src is None:
        raise ValueError(
            f"workload.source {sc.workload.source!r} is unknown; known: {known_sources()}"
        )
    return src.build(sc, n_agents)
