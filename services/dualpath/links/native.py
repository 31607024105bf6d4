"""Optional compiled link code (mypyc): the same source, bit-identical results, ~3x faster.

Opt-in, never part of the default install: `python -m dualpath.links.native` (needs mypy from
the dev extras and a C compiler) compiles the fabric's modules into a cache directory named
after a digest of their sources and of the interpreter, and with `DUALPATH_NATIVE=1` set,
`import dualpath.links` loads that build, but only while the digest matches the sources on
disk: an edited `.py` is never shadowed by a stale build (it runs as Python until rebuilt).
`DUALPATH_NATIVE_DIR` moves the cache (default `~/.cache/dualpath/links-native`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# Compiled together (mypyc resolves calls between them natively), in import order.
MODULES = ("arbitration", "stats", "link", "schedule", "sharing", "fabric")
PACKAGE = "dualpath.links"
_HERE = Path(__file__).resolve().parent


def cache_root() -> Path:
    default = Path.home() / ".cache" / "dualpath" / "links-native"
    return Path(os.environ.get("DUALPATH_NATIVE_DIR") or default)


def digest() -> str:
    """Identity of a build: the interpreter and the exact bytes of every compiled module."""
    h = hashlib.sha256(sys.version.encode())
    for name in MODULES:
        h.update(name.encode())
        h.update((_HERE / f"{name}.py").read_bytes())
    return h.hexdigest()[:20]


class _Finder(MetaPathFinder):
    """Serves the compiled modules (and mypyc's shared runtime library) from the build."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        file = self._files.get(fullname)
        return None if file is None else importlib.util.spec_from_file_location(fullname, file)


def install() -> bool:
    """Route the link modules to a matching build, if there is one. Called by the package
    before it imports them; returns whether the compiled modules will be used."""
    if os.environ.get("DUALPATH_NATIVE", "0") != "1":
        return False
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return True
    try:
        build = cache_root() / digest()
        manifest = json.loads((build / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    files = {name: build / file for name, file in manifest["files"].items()}
    if not all(f.is_file() for f in files.values()):
        return False
    sys.meta_path.insert(0, _Finder(files))
    return True


def active() -> bool:
    """Whether the fabric running now is the compiled one."""
    from dualpath.links import fabric

    return not str(getattr(fabric, "__file__", "")).endswith(".py")


def build(out: Path | None = None) -> Path:
    """Compile the modules with mypyc in a scratch copy of the package; keep only the shared
    objects, under the digest of the sources they were built from."""
    dest = out or cache_root() / digest()
    services = _HERE.parents[1]
    with tempfile.TemporaryDirectory(prefix="dualpath-native-") as tmp:
        work = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
        shutil.copytree(services / "dualpath", work / "dualpath", ignore=ignore)
        sources = [f"dualpath/links/{name}.py" for name in MODULES]
        subprocess.run([sys.executable, "-m", "mypyc", *sources], cwd=work, check=True)
        dest.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        for so in work.glob("*__mypyc*.so"):  # mypyc's shared runtime, a top-level module
            shutil.copy2(so, dest / so.name)
            files[so.name.split(".", 1)[0]] = so.name
        for name in MODULES:
            (so,) = (work / "dualpath" / "links").glob(f"{name}.*.so")
            shutil.copy2(so, dest / so.name)
            files[f"{PACKAGE}.{name}"] = so.name
    (dest / "manifest.json").write_text(json.dumps({"files": files}, indent=2))
    return dest


if __name__ == "__main__":
    where = build()
    print(f"compiled {', '.join(MODULES)} into {where}")
    print("runs with DUALPATH_NATIVE=1 use it while these sources are unchanged")
