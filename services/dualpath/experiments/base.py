"""What an experiment is: a plan of runs (scenarios) and a summary of their reports.

An experiment never runs anything itself: `plan` (and optionally `more`, for refinements
such as a bisection) returns `RunSpec`s, the runner executes them and hands the reports back
to `summarize`, which compares them with the paper's figures (`Row`s), adds free-form tables
and plot callbacks. Reports are `dualpath.report/v1` dicts
(`dualpath.runtimes.virtual.sim.simulate`);
a failed run is `{"error": "..."}` in `results`, so `summarize` must read reports defensively
(see `dualpath.experiments.extract`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dualpath.model.config.settings import Scenario

Label = str | int | float
Report = dict[str, Any]  # a dualpath.report/v1 dict, or {"error": "..."} for a failed run
Results = Mapping[str, Report]  # run key -> report

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One scenario to emulate. `key` names its report file: unique within the experiment
    and filesystem-safe (letters, digits, `.`, `_`, `-`)."""

    key: str
    scenario: Scenario
    labels: dict[str, Label] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            raise ValueError(f"run key {self.key!r}: use letters, digits, '.', '_' and '-' only")


@dataclass(frozen=True, slots=True)
class Row:
    """One "ours vs paper" line. `ratio` = ours / paper (None when either is missing)."""

    figure: str  # e.g. "Fig. 7"
    what: str
    ours: float | None
    paper: float | None
    unit: str = ""
    note: str = ""
    source: str = ""  # where the paper figure comes from (paper_figures.yaml)

    @property
    def ratio(self) -> float | None:
        if self.ours is None or self.paper is None or self.paper == 0:
            return None
        return self.ours / self.paper


@dataclass(frozen=True, slots=True)
class Table:
    """A free-form result table (e.g. the whole JCT grid); cells are already formatted."""

    title: str
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True, slots=True)
class Plot:
    """A PNG the runner writes as `OUT/NAME/filename` by calling `draw(path)`."""

    filename: str
    caption: str
    draw: Callable[[Path], None]


@dataclass(slots=True)
class Summary:
    rows: list[Row] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)  # bullet lines: grid, policies, scenario
    notes: list[str] = field(default_factory=list)  # caveats worth a line on the page


class Experiment(ABC):
    """Subclass, set `name` and `title`, implement `plan` and `summarize`, and add it to
    `dualpath.experiments.registry._builtins` (or an entry point `dualpath.experiments`)."""

    name: ClassVar[str]  # the CLI name, e.g. "offline-agents"
    title: ClassVar[str]  # e.g. "Fig. 7 — offline JCT vs agents"

    @abstractmethod
    def plan(self, quick: bool) -> list[RunSpec]:
        """The runs of the first stage. `quick`: tiny scenarios, about a second each."""

    def more(self, quick: bool, results: Results) -> list[RunSpec]:
        """Runs of a further stage, given everything so far (e.g. the next bisection probe).
        Called after each stage until it returns []; keys already run are ignored."""
        return []

    @abstractmethod
    def summarize(self, quick: bool, results: Results) -> Summary:
        """Compare the reports with the paper. Must tolerate failed runs ({"error": ...})."""
