"""Policies by name: the built-ins and the installed plug-ins (entry-point group
`dualpath.policies`, docs/plugins.md). A policy in this repository = a module with a
`SchedulingPolicy` subclass and its `POLICIES` tuple in `builtin_policies`; a policy in
your own package = an entry point, nothing here changes (docs/scheduling.md)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from dualpath.model.policies.base import Limits, SchedulingPolicy
from dualpath.plugins import POLICIES, Catalog, EntryPointLike, catalog, named_class


class UnknownPolicyError(ValueError):
    pass


# Old names that now mean something else, and the fix (issue 24: the paper's Basic).
RENAMED = {
    "basic-bare": "policy 'basic-bare' is now 'basic' (the paper's Basic: no β guard, no "
    "compute quota); set policy.name / --policy to 'basic' (the old 'basic', with DualPath's "
    "β guard and quota, is 'basic-guarded')",
}


class PolicyRegistry:
    def __init__(self) -> None:
        self._classes: dict[str, type[SchedulingPolicy]] = {}
        self._refused: dict[str, str] = {}  # names only skipped plug-ins claim -> why

    def register(self, cls: type[SchedulingPolicy]) -> type[SchedulingPolicy]:
        if cls.name in self._classes:
            raise ValueError(f"policy name {cls.name!r} is already registered")
        self._classes[cls.name] = cls
        self._refused.pop(cls.name, None)
        return cls

    def refuse(self, name: str, why: str) -> None:
        """Make `get(name)` fail with `why` (a plug-in that claimed it was skipped)."""
        if name not in self._classes:
            self._refused[name] = why

    def names(self) -> list[str]:
        return list(self._classes)

    def get(self, name: str) -> type[SchedulingPolicy]:
        try:
            return self._classes[name]
        except KeyError:
            if name in RENAMED:
                raise UnknownPolicyError(RENAMED[name]) from None
            if name in self._refused:
                raise UnknownPolicyError(
                    f"policy {name!r} (policy.name / --policy): {self._refused[name]}"
                ) from None
            raise UnknownPolicyError(
                f"unknown policy {name!r} (policy.name / --policy); accepted: "
                + ", ".join(self._classes)
            ) from None

    def create(self, name: str, limits: Limits, seed: int) -> SchedulingPolicy:
        return self.get(name)(limits, seed)

    def describe(self) -> dict[str, str]:
        return {n: c.description for n, c in self._classes.items()}


def builtin_policies() -> tuple[type[SchedulingPolicy], ...]:
    from dualpath.model.policies import dualpath, simple, split, tier

    return (*dualpath.POLICIES, *simple.POLICIES, *split.POLICIES, *tier.POLICIES)


def policy_catalog(
    found: Iterable[EntryPointLike] | None = None,
) -> Catalog[type[SchedulingPolicy]]:
    """The built-in policies plus the plug-ins (`found`, default: the installed ones)."""
    builtins = {cls.name: cls for cls in builtin_policies()}
    # The base is abstract on purpose: `named_class` only checks subclasses against it.
    accept = named_class(SchedulingPolicy, "policy")  # type: ignore[type-abstract]
    return catalog(POLICIES, "policy", builtins, accept, found)


def build_registry(policies: Catalog[type[SchedulingPolicy]]) -> PolicyRegistry:
    reg = PolicyRegistry()
    for cls in policies.items.values():
        reg.register(cls)
    for name, why in policies.refused.items():
        reg.refuse(name, why)
    return reg


@cache
def default_registry() -> PolicyRegistry:
    """The process's registry, built once: built-ins, then installed plug-ins.

    One per process (a cached builder, not a module-level object) so that
    `default_registry().register(MyPolicy)` is seen by every later caller in the same
    process (`dualpath.runtimes.virtual.sim.simulate` from a script), and entry points are scanned
    and imported once. A separate process (the CLI, the process runtime's scheduler) only
    sees what is installed: use an entry point there."""
    return build_registry(policy_catalog())
