"""Policies by name. Adding one = a new module with a `SchedulingPolicy` subclass and one
`register` call in `default_registry` (or `registry.register(MyPolicy)` from user code)."""

from __future__ import annotations

from dualpath.policies.base import Limits, SchedulingPolicy


class UnknownPolicyError(ValueError):
    pass


class PolicyRegistry:
    def __init__(self) -> None:
        self._classes: dict[str, type[SchedulingPolicy]] = {}

    def register(self, cls: type[SchedulingPolicy]) -> type[SchedulingPolicy]:
        if cls.name in self._classes:
            raise ValueError(f"policy name {cls.name!r} is already registered")
        self._classes[cls.name] = cls
        return cls

    def names(self) -> list[str]:
        return list(self._classes)

    def get(self, name: str) -> type[SchedulingPolicy]:
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownPolicyError(
                f"unknown policy {name!r} (policy.name / --policy); accepted: "
                + ", ".join(self._classes)
            ) from None

    def create(self, name: str, limits: Limits, seed: int) -> SchedulingPolicy:
        return self.get(name)(limits, seed)

    def describe(self) -> dict[str, str]:
        return {n: c.description for n, c in self._classes.items()}


def default_registry() -> PolicyRegistry:
    from dualpath.policies import dualpath, simple

    reg = PolicyRegistry()
    for cls in (*dualpath.POLICIES, *simple.POLICIES):
        reg.register(cls)
    return reg
