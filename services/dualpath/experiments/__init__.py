"""Named experiments that reproduce the paper's figures (`dualpath experiment NAME`).

See docs/experiments.md. Public API: `Experiment`, `RunSpec`, `Row`, `Table`, `Plot`,
`Summary` (base), `experiments()` (registry), `run_experiment()` (runner).
"""

from __future__ import annotations

from dualpath.experiments.base import (
    Experiment,
    Plot,
    Report,
    Results,
    Row,
    RunSpec,
    Summary,
    Table,
)
from dualpath.experiments.outputs import Outcome, RunRecord
from dualpath.experiments.registry import experiments
from dualpath.experiments.runner import run_experiment

__all__ = [
    "Experiment",
    "Outcome",
    "Plot",
    "Report",
    "Results",
    "Row",
    "RunRecord",
    "RunSpec",
    "Summary",
    "Table",
    "experiments",
    "run_experiment",
]
