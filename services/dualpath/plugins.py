"""Plug-ins from installed packages: one entry-point group per kind of thing (docs/plugins.md).

A researcher's own package adds a scheduling policy, GPU/model profiles, a workload source or
an experiment by declaring an entry point in its pyproject; nothing in this repository
changes. The groups and what an entry point must name:

- `dualpath.policies`: a `SchedulingPolicy` subclass whose `name` is the entry point's name;
- `dualpath.profiles`: a package (or an attribute holding a folder path) whose folder has
  `gpus/*.yaml` and/or `models/*.yaml`;
- `dualpath.workload_sources`: a `WorkloadSource` whose `name` is the entry point's name;
- `dualpath.experiments`: an `Experiment` subclass whose `name` is the entry point's name.

A plug-in that fails to import, names the wrong kind of object, or claims a name a built-in
already has is skipped: one warning line on stderr (logger `dualpath.plugins`) names the
distribution, the entry point and the fix, and the built-ins keep working under their
names. A name that only broken plug-ins claim (or two plug-ins claim) is *refused*: asking
for it is an error that repeats why (`Catalog.refused`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, Protocol, TypeVar

POLICIES = "dualpath.policies"
PROFILES = "dualpath.profiles"
WORKLOAD_SOURCES = "dualpath.workload_sources"
EXPERIMENTS = "dualpath.experiments"
GROUPS = (POLICIES, PROFILES, WORKLOAD_SOURCES, EXPERIMENTS)

log = logging.getLogger("dualpath.plugins")

T = TypeVar("T")


class PluginError(ValueError):
    """A plug-in's name was asked for but the plug-in was skipped; the message says why."""


class DistributionLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


class EntryPointLike(Protocol):
    """What the loader reads of an `importlib.metadata.EntryPoint` (tests pass fakes)."""

    name: str
    value: str
    group: str

    @property
    def dist(self) -> DistributionLike | None: ...

    def load(self) -> Any: ...


# (entry point name, loaded object) -> the checked value; raises TypeError/ValueError whose
# message says what was expected, e.g. "is a function; expected a SchedulingPolicy subclass".
Accept = Callable[[str, object], T]


@dataclass(frozen=True, slots=True)
class Catalog(Generic[T]):
    """Built-ins and working plug-ins by name, and the names refused with why."""

    items: dict[str, T]
    refused: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # plug-in name -> where it is from

    def problem(self, name: str) -> str | None:
        """Why `name` is unusable, when a skipped plug-in claimed it and no built-in has it."""
        return None if name in self.items else self.refused.get(name)


def origin(ep: EntryPointLike) -> str:
    """What messages call a plug-in: "plug-in entry point 'x' (group g) of my-pkg 0.1"."""
    dist = ep.dist
    owner = f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"
    return f"plug-in entry point {ep.name!r} (group {ep.group}) of {owner}"


def _owner(ep: EntryPointLike) -> str:
    return ep.dist.name if ep.dist is not None else "the distribution"


def _load(ep: EntryPointLike, accept: Accept[T]) -> T:
    """The entry point's checked value, or PluginError naming it and the fix."""
    try:
        obj = ep.load()
    except Exception as exc:
        raise PluginError(
            f"{origin(ep)}: cannot load {ep.value!r} ({type(exc).__name__}: {exc}); "
            f"fix or uninstall {_owner(ep)}"
        ) from None
    try:
        return accept(ep.name, obj)
    except (TypeError, ValueError) as exc:
        raise PluginError(f"{origin(ep)}: {ep.value!r} {exc}") from None


def installed(group: str) -> list[EntryPointLike]:
    """The entry points of `group` in the installed distributions (sys.path)."""
    return list(metadata.entry_points(group=group))


def catalog(
    group: str,
    what: str,
    builtins: Mapping[str, T],
    accept: Accept[T],
    found: Iterable[EntryPointLike] | None = None,
    reserved: Collection[str] = (),
) -> Catalog[T]:
    """Built-ins plus the plug-ins of `group` (`found`, default: the installed ones).
    `what` names the kind in messages ("policy"); `reserved`: names no plug-in may take
    (a subcommand's). Every problem is logged once here."""
    claims: dict[str, list[EntryPointLike]] = {}
    for ep in installed(group) if found is None else found:
        claims.setdefault(ep.name, []).append(ep)
    items, refused, origins = dict(builtins), {}, {}
    for name, eps in claims.items():
        problem = _claim_problem(name, what, eps, {*builtins, *reserved})
        if problem is None:
            try:
                items[name], origins[name] = _load(eps[0], accept), origin(eps[0])
                continue
            except PluginError as exc:
                problem = str(exc)
        log.warning("warning: %s (skipped)", problem)
        refused[name] = problem
    return Catalog(items, refused, origins)


def _claim_problem(
    name: str, what: str, eps: list[EntryPointLike], taken: Collection[str]
) -> str | None:
    """Why the plug-ins claiming `name` cannot have it: a built-in has it, or several do."""
    if name in taken:
        return (
            f"{origin(eps[0])}: {name!r} is a built-in {what} name; rename the entry point in "
            f'{_owner(eps[0])}\'s pyproject ([project.entry-points."{eps[0].group}"])'
        )
    if len(eps) > 1:
        return (
            f"{what} {name!r} is claimed by "
            + " and by ".join(origin(ep) for ep in eps)
            + "; rename one or uninstall one"
        )
    return None


def named_class(base: type[T], what: str) -> Accept[type[T]]:
    """An `Accept` for "a concrete subclass of `base` whose `name` is the entry point's"."""

    def accept(name: str, obj: object) -> type[T]:
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise TypeError(f"is {_kind(obj)}; expected a {base.__name__} subclass")
        abstract = sorted(getattr(obj, "__abstractmethods__", ()))
        if abstract:
            raise TypeError(f"leaves {', '.join(abstract)} abstract; implement them")
        check_name(name, getattr(obj, "name", None), what)
        return obj

    return accept


def check_name(name: str, declared: object, what: str) -> None:
    """The entry point's name and the object's `name` must agree: both are how users
    select it (`--policy NAME`) and how reports name it."""
    if declared != name:
        raise ValueError(
            f"has name {declared!r}; set the {what}'s name to the entry point's, {name!r} "
            "(or rename the entry point)"
        )


def _kind(obj: object) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {type(obj).__name__}"
