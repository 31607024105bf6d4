"""Mooncake FAST'25 traces (synthetic_trace.jsonl, and toolagent_trace.jsonl unchanged).

JSON Lines: `timestamp` (ms since the trace start), `input_length`, `output_length`,
`hash_ids` (one global id per 512-token block including the partial last one, so
`len == ceil(input_length / 512)`). There are no session ids, so every request is a
one-turn session keyed by its line number (`req-12` is line 12), starting at its timestamp.
The ids are kept as they are in the file (one global scope).
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from dualpath.model.workload.script import Workload
from dualpath.model.workload.traces.assemble import RawSession, RawTurn, assemble
from dualpath.model.workload.traces.errors import (
    TraceError,
    check_ids,
    need_int,
    need_list,
    need_object,
    need_time,
)

BLOCK_TOKENS = 512


def load_mooncake(
    path: Path,
    *,
    sessions: int | str | None = None,
    requests: int | None = None,
    time_scale: float = 1.0,
    subagents: bool = True,  # no sub-agents in this format; accepted for a uniform call
    emulator_block_tokens: int = 64,
    chain_base: int = 1,
) -> Workload:
    del subagents
    if isinstance(sessions, str) or (
        sessions is not None and (type(sessions) is not int or sessions < 1)
    ):
        raise TraceError(
            f"sessions: expected an integer >= 1 (each Mooncake request is its own session), "
            f"got {sessions!r}"
        )
    lines = _lines(path)
    raw = [_request(text, f"{path.name}:{n}: ", n) for n, text in lines]
    raw.sort(key=lambda s: s.start)  # arrival order (stable: ties keep file order)
    if sessions is not None:
        raw = raw[:sessions]
    picked = "" if sessions is None else f" (first {sessions} sessions)"
    return assemble(
        "mooncake",
        raw,
        block_tokens=BLOCK_TOKENS,
        emulator_block_tokens=emulator_block_tokens,
        time_scale=time_scale,
        requests=requests,
        chain_base=chain_base,
        what=f"{path}, {len(lines)} lines{picked}",
    )


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    try:
        with lzma.open(path) if path.name.endswith(".xz") else path.open("rb") as fh:
            text = fh.read().decode()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder; the Mooncake format is one .jsonl file") from None
    except (OSError, lzma.LZMAError, EOFError, UnicodeDecodeError) as e:
        raise TraceError(f"{path.name}: cannot read ({e})") from None
    out = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not out:
        raise TraceError(f"{path.name}: no requests (the file is empty)")
    return out


def _request(text: str, where: str, line: int) -> RawSession:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{where}not valid JSON ({e})") from None
    r = need_object(obj, where.rstrip(": "))
    ts = need_time(r, "timestamp", where)
    prompt = need_int(r, "input_length", where, minimum=1)
    gen = need_int(r, "output_length", where, minimum=0)
    ids = need_list(r, "hash_ids", where, "a list of integers")
    check_ids(ids, where)
    expected = -(-prompt // BLOCK_TOKENS)
    if len(ids) != expected:
        raise TraceError(
            f"{where}hash_ids: {len(ids)} ids for input_length={prompt}; expected "
            f"ceil(input_length / {BLOCK_TOKENS}) = {expected} (one per block, the partial "
            f"last one included)"
        )
    return RawSession(f"req-{line}", ts / 1000, (RawTurn(0.0, prompt, gen, 0.0, tuple(ids)),))
