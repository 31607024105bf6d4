"""Trace formats by name, and `load_trace` with format detection from the path."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from dualpath.model.workload.script import Workload
from dualpath.model.workload.traces.errors import TraceError
from dualpath.model.workload.traces.mooncake import load_mooncake
from dualpath.model.workload.traces.weka import load_weka


class TraceLoader(Protocol):
    def __call__(
        self,
        path: Path,
        *,
        sessions: int | str | None = None,
        requests: int | None = None,
        time_scale: float = 1.0,
        subagents: bool = True,
        emulator_block_tokens: int = 64,
        chain_base: int = 1,
    ) -> Workload: ...


TRACE_FORMATS: dict[str, TraceLoader] = {"weka": load_weka, "mooncake": load_mooncake}


def known_formats() -> str:
    return ", ".join(sorted(TRACE_FORMATS))


def detect_format(path: Path) -> str:
    """A folder or *.json[.xz] is WEKA (one session per file); *.jsonl[.xz] is Mooncake."""
    name = path.name.removesuffix(".xz")
    if path.is_dir() or name.endswith(".json"):
        return "weka"
    if name.endswith(".jsonl"):
        return "mooncake"
    if not path.exists():
        raise TraceError(f"{path}: no such file or folder")
    raise TraceError(
        f"{path}: cannot tell the trace format from the name (a folder or .json[.xz] is "
        f"weka, .jsonl[.xz] is mooncake); name it explicitly, one of: {known_formats()}"
    )


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    sessions: int | str | None = None,
    requests: int | None = None,
    time_scale: float = 1.0,
    subagents: bool = True,
    emulator_block_tokens: int = 64,
    chain_base: int = 1,
) -> Workload:
    """Load a trace as a Workload (raises TraceError, never returns half a trace).

    sessions: the first N sessions in session order (WEKA: files by name; Mooncake:
    requests by arrival), or, for WEKA, a glob on the file names. requests: then the first
    N requests of the whole trace in arrival order. time_scale multiplies every trace time.
    subagents (WEKA): merge sub-agent requests into their parent session by time, or drop
    them. emulator_block_tokens: the engine's KV block (Fork.at is counted in those).
    chain_base: the first chain id to use.
    """
    p = Path(path)
    name = detect_format(p) if fmt is None else fmt
    loader = TRACE_FORMATS.get(name)
    if loader is None:
        raise TraceError(f"trace format {name!r} is unknown; known formats: {known_formats()}")
    return loader(
        p,
        sessions=sessions,
        requests=requests,
        time_scale=time_scale,
        subagents=subagents,
        emulator_block_tokens=emulator_block_tokens,
        chain_base=chain_base,
    )
