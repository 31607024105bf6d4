"""Experiments by name: the built-ins (one module with an `Experiment` subclass + one line in
`_builtins`) and the installed plug-ins (entry-point group `dualpath.experiments`,
docs/plugins.md)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from dualpath.experiments.base import Experiment
from dualpath.plugins import EXPERIMENTS, Catalog, EntryPointLike, catalog, named_class

# `dualpath experiment list` is a command, not an experiment.
_RESERVED = "list"


def _builtins() -> list[type[Experiment]]:
    from dualpath.experiments.ablation import Ablation
    from dualpath.experiments.append_scale import AppendScale, GenScale
    from dualpath.experiments.balance import Balance
    from dualpath.experiments.dram_tier import DramTier
    from dualpath.experiments.offline_agents import OfflineAgents
    from dualpath.experiments.online_capacity import OnlineCapacity
    from dualpath.experiments.pd_range import PdRange
    from dualpath.experiments.pd_ratio import PdRatio
    from dualpath.experiments.scale import Scale

    return [
        OfflineAgents, PdRatio, AppendScale, GenScale, Ablation, Balance, PdRange, OnlineCapacity,
        Scale, DramTier,
    ]  # fmt: skip


def experiment_catalog(found: Iterable[EntryPointLike] | None = None) -> Catalog[type[Experiment]]:
    """The built-in experiment classes plus the plug-ins (`found`, default: the installed
    ones). `list` counts as taken, like a built-in's name."""
    builtins: dict[str, type[Experiment]] = {}
    for cls in _builtins():
        if cls.name in builtins or cls.name == _RESERVED:
            raise ValueError(f"experiment name {cls.name!r} is taken")
        builtins[cls.name] = cls
    return catalog(EXPERIMENTS, "experiment", builtins, _plugin, found, reserved=(_RESERVED,))


def _plugin(name: str, obj: object) -> type[Experiment]:
    cls = named_class(Experiment, "experiment")(name, obj)  # type: ignore[type-abstract]
    try:  # `experiments()` creates a fresh one per call: a failure must show here, named
        cls()
    except Exception as exc:
        raise TypeError(
            f"cannot be created without arguments ({type(exc).__name__}: {exc})"
        ) from None
    return cls


@cache
def _installed() -> Catalog[type[Experiment]]:
    # Once per process: the entry points are scanned and imported (and warned about) once.
    return experiment_catalog()


def experiments() -> dict[str, Experiment]:
    """A fresh name -> experiment mapping, in the order `dualpath experiment list` shows:
    built-ins, then installed plug-ins."""
    return {name: cls() for name, cls in _installed().items.items()}
