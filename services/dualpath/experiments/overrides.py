"""`dualpath experiment NAME --set path.to.key=value`: every run of an experiment with a
setting changed, e.g. a fidelity alternative measured on a whole figure
(`--set engine.fetch_mode=on-change`, docs/fidelity.md).

The runs go to their own folder, `OUT/NAME+set-<digest of the items>/`, so they never
overwrite the default runs' reports, and the summary says which settings were changed.
Runs are cached by their whole scenario, so the default ones are never reused for them.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

from dualpath.experiments.base import Experiment, Results, RunSpec, Summary
from dualpath.model.config.presets import parse_set, with_sets


def set_digest(sets: list[str]) -> str:
    """Eight hex digits naming a set of `--set` items (their order does not matter)."""
    return hashlib.sha256("\n".join(sorted(sets)).encode()).hexdigest()[:8]


def with_overrides(exp: Experiment, sets: list[str], quick: bool) -> Experiment:
    """`exp` with `sets` applied on top of every run's scenario; `exp` itself if none.

    Checks the items now (a bad key or value fails before anything runs, naming it)."""
    if not sets:
        return exp
    parse_set(sets)  # the syntax, for every item
    first = exp.plan(quick)
    if first:
        with_sets(first[0].scenario, sets)  # the keys and values, against the schema
    inner = exp
    flags = " ".join(f"--set {item}" for item in sets)

    def apply(specs: list[RunSpec]) -> list[RunSpec]:
        return [RunSpec(s.key, with_sets(s.scenario, sets), s.labels) for s in specs]

    class Overridden(Experiment):
        name: ClassVar[str] = f"{inner.name}+set-{set_digest(sets)}"
        title: ClassVar[str] = inner.title

        def plan(self, quick: bool) -> list[RunSpec]:
            return apply(inner.plan(quick))

        def more(self, quick: bool, results: Results) -> list[RunSpec]:
            return apply(inner.more(quick, results))

        def summarize(self, quick: bool, results: Results) -> Summary:
            summary = inner.summarize(quick, results)
            summary.setup.insert(0, f"every run with {flags}: not the paper's defaults")
            return summary

    return Overridden()
