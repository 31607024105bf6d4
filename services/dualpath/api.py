"""The public surface for plug-ins: import from here, and internal moves never break you.

Everything a policy, workload source, profile package or experiment of your own needs
(docs/plugins.md). The names below are re-exported from where they live today; the package
may move them between its folders, but they stay importable from `dualpath.api`.

- policies: `SchedulingPolicy` (subclass it), `Limits`, `DualPath` (the paper's scheduler,
  to extend), and the records a policy sees: `Request`, `EngineState`, `NodeState`, `ReadPath`;
- workload sources: `WorkloadSource`, `Scenario` (the settings it is given), `Workload`,
  `AgentScript`, `ScriptTurn`;
- profiles: `GpuProfile`, `ModelProfile`, `load_gpu`, `load_model`;
- experiments: `Experiment`, `RunSpec`, `Results`, `Summary`, `Table`, `Plot`, `Row`, and the
  helpers the built-in ones use: `jct`, `div`, `paper_row`, `scenarios` (the paper's arms,
  `build`, `labels`, `run_key`);
- `register`: the entry-point group names (`register.POLICIES`, ...) a `pyproject.toml`
  declares its plug-ins under.
"""

from __future__ import annotations

from types import SimpleNamespace

from dualpath import plugins as _plugins
from dualpath.experiments import scenarios
from dualpath.experiments.base import Experiment, Plot, Results, Row, RunSpec, Summary, Table
from dualpath.experiments.extract import div, jct
from dualpath.experiments.figures import paper_row
from dualpath.model.config.settings import Scenario
from dualpath.model.config.workload_sources import WorkloadSource
from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import Limits, SchedulingPolicy
from dualpath.model.policies.dualpath import DualPath
from dualpath.model.roofline.profiles import GpuProfile, ModelProfile, load_gpu, load_model
from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload

# The entry-point groups: `[project.entry-points."<group>"]` in a plug-in's pyproject.toml.
register = SimpleNamespace(
    POLICIES=_plugins.POLICIES,
    PROFILES=_plugins.PROFILES,
    WORKLOAD_SOURCES=_plugins.WORKLOAD_SOURCES,
    EXPERIMENTS=_plugins.EXPERIMENTS,
)

__all__ = [
    "AgentScript",
    "DualPath",
    "EngineState",
    "Experiment",
    "GpuProfile",
    "Limits",
    "ModelProfile",
    "NodeState",
    "Plot",
    "ReadPath",
    "Request",
    "Results",
    "Row",
    "RunSpec",
    "Scenario",
    "SchedulingPolicy",
    "ScriptTurn",
    "Summary",
    "Table",
    "Workload",
    "WorkloadSource",
    "div",
    "jct",
    "load_gpu",
    "load_model",
    "paper_row",
    "register",
    "scenarios",
]
