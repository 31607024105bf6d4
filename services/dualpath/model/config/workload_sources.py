"""Workload sources by name: what `workload.source` selects, for every runtime.

"synthetic" is the Table 2 generator (`workload.agents`, `max_len`, scales, `seed`), and
"synthetic-weka" the same datasets with the WEKA trace's dispersion (model/workload/shaped.py);
"weka" and "mooncake" replay the trace at `workload.trace` (docs/traces.md); installed
packages add more (entry-point group `dualpath.workload_sources`, docs/plugins.md). Both
runtimes and the Locust load generator call `build_workload`, so they replay the same scripts.
Pure (no asyncio): the Locust process imports it.

It lives in `config`, above `workload`, because the settings check `workload.source` against
it and a source's `build` takes the `Scenario`: the workload package itself stays free of
the settings (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

from dualpath.model.workload.profiles import pooled_profile_for, short_first_profile_for
from dualpath.model.workload.script import Workload, first_turns, synthetic_workload
from dualpath.model.workload.shaped import weka_shaped_trajectories
from dualpath.model.workload.synthetic import (
    pooled_trajectories,
    short_first_trajectories,
    synthetic_trajectories,
)
from dualpath.model.workload.table2 import parse_max_len
from dualpath.model.workload.traces.registry import load_trace
from dualpath.model.workload.trajectory import Trajectory
from dualpath.plugins import WORKLOAD_SOURCES as GROUP
from dualpath.plugins import Catalog, EntryPointLike, catalog, check_name

if TYPE_CHECKING:  # settings import this module only when they check a source's name
    from dualpath.model.config.settings import Scenario


# (max_len, n_agents, seed, append_scale, gen_scale) -> trajectories
Generator = Callable[[int, int, int, float, float], list[Trajectory]]


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    name: str
    needs_trace: bool  # `workload.trace` must name a file or folder
    build: Callable[[Scenario, int | None], Workload]
    help: str
    # the max_len (tokens) the source can build; raises ValueError naming the fix otherwise
    # (the settings call it, so a bad pair is a one-line settings error, not a traceback)
    check_max_len: Callable[[int], object] | None = None


def _table2(name: str, generate: Generator) -> Callable[[Scenario, int | None], Workload]:
    """A Table 2 generator as a source (same settings: agents, max_len, scales, seed)."""

    def build(sc: Scenario, n_agents: int | None) -> Workload:
        w = sc.workload
        trajs = generate(
            parse_max_len(w.max_len), n_agents or w.agents, sc.seed, w.append_scale, w.gen_scale
        )
        # offline runs have no tool time (paper §7.3); online agents think between turns (§7.4)
        think = sc.online.think_time_s if w.mode == "online" else 0.0
        workload = synthetic_workload(trajs, think)
        if name == workload.source:
            return workload
        described = workload.description.replace(workload.source, name, 1)
        return replace(workload, source=name, description=described)

    return build


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


# The built-ins; `workload_sources()` adds the installed plug-ins.
WORKLOAD_SOURCES: dict[str, WorkloadSource] = {
    s.name: s
    for s in (
        WorkloadSource(
            "synthetic",
            False,
            _table2("synthetic", synthetic_trajectories),
            "paper Table 2 trajectories (agents, max_len)",
        ),
        WorkloadSource("weka", True, _trace("weka"), "WEKA Claude Code sessions (folder)"),
        WorkloadSource("mooncake", True, _trace("mooncake"), "Mooncake JSONL trace"),
        WorkloadSource(
            "synthetic-pooled",
            False,
            _table2("synthetic-pooled", pooled_trajectories),
            "paper Table 2 with Append/Gen read as pooled per-turn means (docs/fidelity.md)",
            pooled_profile_for,
        ),
        WorkloadSource(
            "synthetic-short-first",
            False,
            _table2("synthetic-short-first", short_first_trajectories),
            "paper Table 2 with a 2.8K-token first prompt, the rest refitted (docs/fidelity.md)",
            short_first_profile_for,
        ),
        WorkloadSource(
            "synthetic-weka",
            False,
            _table2("synthetic-weka", weka_shaped_trajectories),
            "paper Table 2 means with the WEKA trace's dispersion (docs/workload.md)",
        ),
    )
}


def _plugin_source(name: str, obj: object) -> WorkloadSource:
    if not isinstance(obj, WorkloadSource):
        raise TypeError(f"is a {type(obj).__name__}; expected a WorkloadSource")
    check_name(name, obj.name, "workload source")
    return obj


def source_catalog(found: Iterable[EntryPointLike] | None = None) -> Catalog[WorkloadSource]:
    """The built-in sources plus the plug-ins (`found`, default: the installed ones)."""
    return catalog(GROUP, "workload source", WORKLOAD_SOURCES, _plugin_source, found)


@cache
def workload_sources() -> Catalog[WorkloadSource]:
    """Built-ins and installed plug-ins (group `dualpath.workload_sources`), once per
    process: settings validate every scenario against it."""
    return source_catalog()


def find_source(name: str) -> WorkloadSource:
    """The source `workload.source` names; ValueError names the accepted ones, or why a
    plug-in of that name was skipped."""
    sources = workload_sources()
    src = sources.items.get(name)
    if src is not None:
        return src
    problem = sources.problem(name)
    if problem is not None:
        raise ValueError(f"workload.source {name!r}: {problem}")
    raise ValueError(f"unknown workload source {name!r}; known: {known_sources()}")


def known_sources() -> str:
    return ", ".join(workload_sources().items)


def build_workload(sc: Scenario, n_agents: int | None = None) -> Workload:
    """The scenario's scripts. `n_agents`: synthetic, how many agents (default
    `workload.agents`); a trace, at most that many sessions (with `trace_sessions`)."""
    return find_source(sc.workload.source).build(sc, n_agents)
