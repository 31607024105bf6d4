"""Optional compiled model (mypyc): the same source, bit-identical results, faster.

Built on request, never part of the default install: `python -m dualpath.native` (`make
native`; needs mypy from the dev extras and a C compiler) compiles the virtual-time runtime's
hot modules (the fabric, the engines, the DualPath policy, the roofline, the block chains, the
clock and the metrics) into a cache directory named after a digest of their sources and of the
interpreter. `import dualpath` loads that build only while the digest matches the package's
sources on disk: after any edit the package runs as Python until rebuilt, never on a stale
build. `DUALPATH_NATIVE_DIR` moves the cache (default `~/.cache/dualpath/native`).

When it is loaded (`wanted`): with `DUALPATH_NATIVE=1`, in any process; with the variable
unset, by the virtual-time commands (`dualpath sim`, `experiment`, `plan`), which say on stderr
how to get it when there is no build of these sources; with `DUALPATH_NATIVE=0`, never. The
process runtime, the tests and library use stay Python unless asked.

Classes users subclass (policies, the scheduler, the decode unit) carry
`@mypyc_attr(allow_interpreted_subclasses=True)` (dualpath/compiled.py), so plug-ins and the
process runtime's subclasses stay plain Python on top of the compiled bases.
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
from collections.abc import Mapping, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Final

# Compiled together (mypyc resolves calls between them natively): the virtual core with the
# fabric and the engines it drives. Not the asyncio virtual loop: a subclass of asyncio's loop
# can only be a non-native class, and that ran slower (native.md).
MODULES = (
    "dualpath.model.core.virtual_core",
    "dualpath.model.links.arbitration",
    "dualpath.model.links.stats",
    "dualpath.model.links.link",
    "dualpath.model.links.schedule",
    "dualpath.model.links.cover",
    "dualpath.model.links.passes",
    "dualpath.model.links.sharing",
    "dualpath.model.links.fabric",
    "dualpath.model.roofline.model",
    "dualpath.model.entities.request",
    "dualpath.model.entities.record",
    "dualpath.model.entities.steps",
    "dualpath.model.entities.metrics",
    "dualpath.model.blocks.range",
    "dualpath.model.blocks.chain",
    "dualpath.model.blocks.store",
    "dualpath.model.core.clock",
    "dualpath.model.policies.base",
    "dualpath.model.policies.dualpath",
    "dualpath.model.engines.context",
    "dualpath.model.engines.hardware",
    "dualpath.model.engines.fetches",
    "dualpath.model.engines.decode_batch",
    "dualpath.model.engines.decode",
    "dualpath.model.engines.prefill",
    "dualpath.model.engines.scheduler",
    "dualpath.model.engines.capacity",
    "dualpath.model.engines.kv_read",
    "dualpath.model.engines.tier_read",
    "dualpath.runtimes.virtual.agents",
    "dualpath.report.floor",
    "dualpath.report.breakdown",
)
_SERVICES = Path(__file__).resolve().parents[2]


def _source(module: str) -> Path:
    return _SERVICES.joinpath(*module.split(".")).with_suffix(".py")


class BuildError(RuntimeError):
    """The compiler could not build the modules (message says why and what to install)."""


def cache_root() -> Path:
    default = Path.home() / ".cache" / "dualpath" / "native"
    return Path(os.environ.get("DUALPATH_NATIVE_DIR") or default)


def digest() -> str:
    """Identity of a build: the interpreter, the module list and the exact bytes of every
    source of the package. Not only the compiled modules: their machine code also assumes
    the types of what they import (settings, workload records), so any edit invalidates it."""
    h = hashlib.sha256(sys.version.encode())
    h.update(" ".join(MODULES).encode())
    package = _SERVICES / "dualpath"
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def built() -> Path | None:
    """The build for these sources, if there is a complete one."""
    where = cache_root() / digest()
    try:
        manifest = json.loads((where / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    files = [where / file for file in manifest["files"].values()]
    return where if files and all(f.is_file() for f in files) else None


class _Finder(MetaPathFinder):
    """Serves the compiled modules (and mypyc's shared runtime library) from the build."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        file = self._files.get(fullname)
        return None if file is None else importlib.util.spec_from_file_location(fullname, file)


# The commands that run the virtual-time runtime: they load a build without being asked.
VIRTUAL_COMMANDS: Final = frozenset({"sim", "experiment", "plan"})
ON, OFF, AUTO = "on", "off", "auto"


def wanted(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """Whether this process loads a build: ON (`DUALPATH_NATIVE=1`), OFF (`=0`, or anything
    but a virtual-time command with the variable unset), AUTO (a virtual-time command: a build
    if there is one, and a hint on stderr if not). `argv` is `sys.argv` while `dualpath` is
    imported: `[".../dualpath", "sim", ...]`, or `["-m", "sim", ...]` under `python -m dualpath`."""
    flag = env.get("DUALPATH_NATIVE", "")
    if flag:
        return ON if flag == "1" else OFF
    if len(argv) < 2 or Path(argv[0]).name not in ("dualpath", "-m"):
        return OFF
    command = next((a for a in argv[1:] if not a.startswith("-")), "")
    return AUTO if command in VIRTUAL_COMMANDS else OFF


def install() -> bool:
    """Route the compiled modules to a matching build, if there is one and it is wanted.
    Called by `dualpath/__init__.py`, before any of them is imported; returns whether they
    will be."""
    mode = wanted(os.environ, sys.argv)
    if mode == OFF:
        return False
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return True
    where = built()
    if where is None:
        if mode == AUTO:
            print(_hint(), file=sys.stderr)
        return False
    manifest = json.loads((where / "manifest.json").read_text())
    files = {name: where / file for name, file in manifest["files"].items()}
    sys.meta_path.insert(0, _Finder(files))
    if mode == AUTO:  # an experiment's workers are spawned interpreters: they inherit it
        os.environ["DUALPATH_NATIVE"] = "1"
    return True


def _hint() -> str:
    """What to do for a virtual-time command without a build of these sources."""
    stale = any(cache_root().glob("*/manifest.json"))
    why = (
        "the compiled model was built from other sources (edited since `make native`)"
        if stale
        else "there is no compiled model"
    )
    return (
        f"dualpath: {why}, so the model runs as Python: same results, 3 to 10 times slower. "
        "`make native` (or `python -m dualpath.native`, about 90 s) builds it; "
        "DUALPATH_NATIVE=0 hides this line (docs/native.md)."
    )


def active() -> bool:
    """Whether the model running now is the compiled one (every module of the build)."""
    modules = [importlib.import_module(m) for m in MODULES]
    return not any(str(getattr(m, "__file__", "")).endswith(".py") for m in modules)


def build(out: Path | None = None) -> Path:
    """Compile the modules with mypyc in a scratch copy of the package; keep only the shared
    objects, under the digest of the sources they were built from."""
    dest = out or cache_root() / digest()
    with tempfile.TemporaryDirectory(prefix="dualpath-native-") as tmp:
        work = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
        shutil.copytree(_SERVICES / "dualpath", work / "dualpath", ignore=ignore)
        sources = [str(_source(m).relative_to(_SERVICES)) for m in MODULES]
        # mypyc type-checks what the modules import too (the settings: pydantic models, which
        # need the project's plugin); only this copy may be on its path, not a PYTHONPATH.
        (work / "mypy.ini").write_text("[mypy]\nplugins = pydantic.mypy\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
        cmd = [sys.executable, "-m", "mypyc", *sources]
        done = subprocess.run(cmd, check=False, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BuildError(
                f"mypyc failed (exit {done.returncode}); it needs mypy from the dev extras "
                f"(pip install -e '.[dev]') and a C compiler. Its last lines:\n{tail}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        for so in work.glob("*__mypyc*.so"):  # mypyc's shared runtime, a top-level module
            shutil.copy2(so, dest / so.name)
            files[so.name.split(".", 1)[0]] = so.name
        for module in MODULES:
            package, name = module.rsplit(".", 1)
            (so,) = work.joinpath(*package.split(".")).glob(f"{name}.*.so")
            # Modules of different packages may share a file name (a flat cache directory).
            target = f"{module}{''.join(so.suffixes)}"
            shutil.copy2(so, dest / target)
            files[module] = target
    (dest / "manifest.json").write_text(json.dumps({"files": files}, indent=2))
    return dest
