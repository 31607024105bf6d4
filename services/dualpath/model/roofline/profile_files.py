"""Where profile files are found by name: shipped with the package
(`dualpath/profiles/{gpus,models}/*.yaml`), then in installed plug-ins' folders
(entry-point group `dualpath.profiles`, docs/plugins.md). Parsing is `profiles.py`'s."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import ModuleType

from dualpath.plugins import PROFILES, Catalog, EntryPointLike, catalog

_PROFILE_ROOT = ("profiles",)
KINDS = ("gpus", "models")

log = logging.getLogger("dualpath.plugins")


def _shipped(kind: str) -> Traversable:
    return resources.files("dualpath").joinpath(*_PROFILE_ROOT, kind)


@dataclass(frozen=True, slots=True)
class Shelf:
    """One kind's profile files by name (shipped, then plug-ins'), each with the label
    messages call it by, and the names refused because two plug-ins ship them."""

    files: dict[str, tuple[str, Traversable]]
    refused: dict[str, str]


def _yaml_files(folder: Traversable) -> dict[str, Traversable]:
    if not folder.is_dir():
        return {}
    found = {p.name.removesuffix(".yaml"): p for p in folder.iterdir() if p.name.endswith(".yaml")}
    return dict(sorted(found.items()))


def _plugin_folder(name: str, obj: object) -> Traversable:
    """A `dualpath.profiles` entry point: a package, or a folder path, with gpus/ or models/."""
    if isinstance(obj, ModuleType):
        if not hasattr(obj, "__path__"):
            raise TypeError(f"is the module {obj.__name__}, not a package; name a package")
        root: Traversable = resources.files(obj)
    elif isinstance(obj, str | os.PathLike):
        root = Path(obj)
    elif isinstance(obj, Traversable):
        root = obj
    else:
        raise TypeError(f"is a {type(obj).__name__}; expected a package or a folder path")
    if not any(root.joinpath(kind).is_dir() for kind in KINDS):
        raise ValueError(f"is the folder {root}, which has neither gpus/ nor models/")
    return root


def build_shelf(kind: str, folders: Catalog[Traversable]) -> Shelf:
    """Shipped files keep their names; a plug-in file with a shipped name is skipped, and
    a name two plug-ins ship is refused (neither is the obvious one)."""
    what = f"{kind.removesuffix('s')} profile"
    files = {n: (f"profiles/{kind}/{n}.yaml", e) for n, e in _yaml_files(_shipped(kind)).items()}
    shipped, refused = set(files), dict[str, str]()
    for ep_name, root in folders.items.items():
        for n, entry in _yaml_files(root.joinpath(kind)).items():
            label = f"{kind}/{n}.yaml of {folders.origins[ep_name]}"
            problem = None
            if n in shipped:
                problem = f"{label}: {n!r} is a shipped {what}; rename the file"
            elif n in files or n in refused:
                other = files.pop(n)[0] if n in files else refused[n]
                problem = refused[n] = f"{what} {n!r} is both {other} and {label}; rename one"
            else:
                files[n] = (label, entry)
            if problem is not None:
                log.warning("warning: %s (skipped)", problem)
    return Shelf(files, refused)


def plugin_folders(found: Iterable[EntryPointLike] | None = None) -> Catalog[Traversable]:
    """The plug-ins' profile folders (`found`, default: the installed entry points)."""
    return catalog(PROFILES, "profile folder", {}, _plugin_folder, found)


@cache
def _shelves() -> dict[str, Shelf]:
    # Once per process: entry points are scanned and imported (and warned about) once.
    folders = plugin_folders()
    return {kind: build_shelf(kind, folders) for kind in KINDS}


def shelf(kind: str) -> Shelf:
    """The profile files of `kind` ("gpus" or "models") by name, for this process."""
    return _shelves()[kind]
