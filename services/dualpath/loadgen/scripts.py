"""The agent scripts the load generator replays:
`dualpath.model.config.workload_sources.build_workload` (synthetic Table 2 agents or a trace, by
`workload.source`), the same scripts both runtimes replay. Pure: the Locust process imports it.
"""

from __future__ import annotations

from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import build_workload
from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload

__all__ = ["AgentScript", "ScriptTurn", "Workload", "load_workload", "total_turns"]


def load_workload(sc: Scenario, n_agents: int | None = None) -> Workload:
    return build_workload(sc, n_agents)


def total_turns(workload: Workload, sessions: int) -> int:
    """Turns of the first `sessions` sessions when scripts are handed out in order and reused
    in a cycle (0 = every script once)."""
    scripts = workload.scripts
    if not scripts:
        return 0
    n = sessions or len(scripts)
    return sum(len(scripts[k % len(scripts)].turns) for k in range(n))
