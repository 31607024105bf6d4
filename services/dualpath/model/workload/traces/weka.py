"""WEKA kv-cache-tester traces: real Claude Code sessions, one JSON(.xz) file per session.

Format (data/traces/weka_claude_code/README.md): `requests` holds normal ("n") and streaming
("s") calls with `t`, `in`, `out`, `hash_ids` (one id per full `block_size`-token block, so
`len == in // block_size`) and usually `think_time`; a "subagent" entry carries its own
nested `requests` whose `t` is relative to the marker's `t`, in the parent's id namespace.

Loaded as: one session per file (key = the file's `id`), sessions starting at 0 (the trace
has no global clock; see script.shift_starts), sub-agent requests merged into the parent's
session by absolute time (or left out). Only the selected files are opened.
"""

from __future__ import annotations

import json
import lzma
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from dualpath.model.workload.script import Workload
from dualpath.model.workload.traces.assemble import IdSpace, RawSession, RawTurn, assemble
from dualpath.model.workload.traces.errors import (
    TraceError,
    need_int,
    need_list,
    need_object,
    need_time,
    opt_time,
)

DEFAULT_BLOCK_TOKENS = 64  # when a file has no `block_size` (the v8 set always has one)
_SUFFIXES = (".json", ".json.xz")


def weka_files(path: Path, sessions: int | str | None = None) -> list[Path]:
    """The session files to load: a file, or a folder's *.json / *.json.xz in name order
    (a dataset folder with a `traces/` subfolder also works); then the first `sessions`
    files, or those whose name matches the glob `sessions`."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith(_SUFFIXES))
        if not files and (path / "traces").is_dir():
            return weka_files(path / "traces", sessions)
        if not files:
            raise TraceError(f"{path}: no .json or .json.xz session files in this folder")
    else:
        raise TraceError(f"{path}: no such file or folder")
    if sessions is None:
        return files
    if isinstance(sessions, str):
        chosen = [f for f in files if fnmatch(f.name, sessions) or fnmatch(_stem(f), sessions)]
        if not chosen:
            raise TraceError(
                f"sessions: the glob {sessions!r} matches none of the {len(files)} files in "
                f"{path} (e.g. {files[0].name}; write e.g. 'trace_00[0-4]*')"
            )
        return chosen
    if type(sessions) is not int or sessions < 1:
        raise TraceError(f"sessions: expected an integer >= 1 or a glob, got {sessions!r}")
    return files[:sessions]


def load_weka(
    path: Path,
    *,
    sessions: int | str | None = None,
    requests: int | None = None,
    time_scale: float = 1.0,
    subagents: bool = True,
    emulator_block_tokens: int = 64,
    chain_base: int = 1,
) -> Workload:
    files = weka_files(path, sessions)
    ids = IdSpace()
    raw: list[RawSession] = []
    keys: dict[str, str] = {}
    block_tokens: int | None = None
    first_file = ""
    for f in files:
        top = _read(f)
        size = _block_size(top, f.name)
        if block_tokens is None:
            block_tokens, first_file = size, f.name
        elif size != block_tokens:
            raise TraceError(
                f"{f.name}: block_size: {size} differs from the {block_tokens} of {first_file} "
                f"(one workload has one block size)"
            )
        s = _session(top, f, size, subagents, ids)
        if s.key in keys:
            raise TraceError(f"{f.name}: id: {s.key!r} is also the id of {keys[s.key]}")
        keys[s.key] = f.name
        raw.append(s)
    where = path if len(files) > 1 else files[0]
    picked = "" if sessions is None else f" (sessions={sessions!r})"
    subs = "sub-agents merged by time" if subagents else "parent requests only"
    return assemble(
        "weka",
        raw,
        block_tokens=block_tokens or DEFAULT_BLOCK_TOKENS,
        emulator_block_tokens=emulator_block_tokens,
        time_scale=time_scale,
        requests=requests,
        chain_base=chain_base,
        what=f"{where}, {len(files)} file{'' if len(files) == 1 else 's'}{picked}, {subs}",
    )


def _stem(f: Path) -> str:
    return f.name.removesuffix(".xz").removesuffix(".json")


def _read(f: Path) -> dict[str, Any]:
    try:
        with lzma.open(f) if f.name.endswith(".xz") else f.open("rb") as fh:
            data = fh.read()
        top = json.loads(data)
    except FileNotFoundError:
        raise TraceError(f"{f}: no such file") from None
    except (OSError, lzma.LZMAError, EOFError) as e:
        raise TraceError(f"{f.name}: cannot read ({e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"{f.name}: not valid JSON ({e})") from None
    return need_object(top, f.name)


def _block_size(top: dict[str, Any], name: str) -> int:
    if "block_size" not in top:
        return DEFAULT_BLOCK_TOKENS
    return need_int(top, "block_size", f"{name}: ", minimum=1)


def _session(top: dict[str, Any], f: Path, block: int, subagents: bool, ids: IdSpace) -> RawSession:
    name = f.name
    key = top.get("id", _stem(f))
    if type(key) is not str or not key:
        raise TraceError(f"{name}: id: expected a non-empty string, got {key!r}")
    scope = top.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise TraceError(f"{name}: hash_id_scope: expected 'local' or 'global', got {scope!r}")
    table = {} if scope == "local" else ids.shared
    entries: list[tuple[float, int, dict[str, Any], str]] = []  # (abs t, stream, req, where)
    for i, item in enumerate(need_list(top, "requests", f"{name}: ", "a list of requests")):
        where = f"{name}: requests[{i}]"
        r = need_object(item, where)
        kind = r.get("type")
        if kind in ("n", "s"):
            entries.append((need_time(r, "t", f"{where}."), 0, r, where))
        elif kind == "subagent":
            t0 = need_time(r, "t", f"{where}.")
            if not subagents:
                continue
            nested = need_list(r, "requests", f"{where}.", "a list of requests")
            for j, sub in enumerate(nested):
                w = f"{where}.requests[{j}]"
                q = need_object(sub, w)
                if q.get("type", "n") not in ("n", "s"):
                    raise TraceError(
                        f"{w}.type: expected 'n' or 's' (sub-agents do not nest), "
                        f"got {q.get('type')!r}"
                    )
                entries.append((t0 + need_time(q, "t", f"{w}."), i + 1, q, w))
        else:
            raise TraceError(f"{where}.type: expected 'n', 's' or 'subagent', got {kind!r}")
    if not entries:
        raise TraceError(f"{name}: requests: the session has no requests")
    entries.sort(key=lambda e: e[0])  # stable: a tie keeps trace order
    turns: list[RawTurn] = []
    prev: tuple[float, int, float] | None = None  # (abs t, stream, api time) of the last one
    last: dict[int, tuple[list[Any], tuple[int, ...]]] = {}  # stream -> its last ids, mapped
    for t, stream, r, where in entries:
        w = f"{where}."
        prompt = need_int(r, "in", w, minimum=1)
        gen = need_int(r, "out", w, minimum=0)
        hashes = need_list(r, "hash_ids", w, "a list of integers")
        if len(hashes) != prompt // block:
            raise TraceError(
                f"{w}hash_ids: {len(hashes)} ids for in={prompt}; expected in // block_size "
                f"= {prompt // block} (one id per full {block}-token block)"
            )
        think_time = opt_time(r, "think_time", w)
        api = opt_time(r, "api_time", w) or 0.0
        if prev is None:
            think = 0.0
        elif think_time is not None and prev[1] == stream:
            think = think_time
        else:
            # no think_time, or the previous turn belongs to another stream (a sub-agent
            # interleaved by time): the idle gap after the previous response, from the clock
            think = max(0.0, t - prev[0] - prev[2])
        prev = (t, stream, api)
        mapped = ids.map(table, hashes, w, last.get(stream))
        last[stream] = (hashes, mapped)
        turns.append(RawTurn(t, prompt, gen, think, mapped))
    return RawSession(key, 0.0, tuple(turns))
