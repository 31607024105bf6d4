"""Experiments by name. Adding one = one module with an `Experiment` subclass + one line here."""

from __future__ import annotations

from dualpath.experiments.base import Experiment


def experiments() -> dict[str, Experiment]:
    """A fresh name -> experiment mapping, in the order `dualpath experiment list` shows."""
    from dualpath.experiments.ablation import Ablation
    from dualpath.experiments.append_scale import AppendScale
    from dualpath.experiments.balance import Balance
    from dualpath.experiments.offline_agents import OfflineAgents
    from dualpath.experiments.online_capacity import OnlineCapacity
    from dualpath.experiments.pd_range import PdRange
    from dualpath.experiments.pd_ratio import PdRatio

    found: list[Experiment] = [
        OfflineAgents(),
        PdRatio(),
        AppendScale(),
        Ablation(),
        Balance(),
        PdRange(),
        OnlineCapacity(),
    ]
    out: dict[str, Experiment] = {}
    for exp in found:
        if exp.name in out or exp.name == "list":
            raise ValueError(f"experiment name {exp.name!r} is taken")
        out[exp.name] = exp
    return out
