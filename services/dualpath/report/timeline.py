"""The run over time, as the paper's Fig. 15 plots its 48P96D run: prompt tokens per
second, TTFT, and running agents, per window of `WINDOW_S` emulated seconds (the windows of
the SNIC series, so the two line up).

- `prompt_tps`: prompt tokens (cached hit + new) of the turns whose first token came in the
  window, per second: the rate prefill turns prompts into first tokens.
- `ttft_mean_s`: mean TTFT of the turns that arrived in the window (null: none arrived), so
  the start-of-task peak (every agent's first read at once) shows where it happens.
- `running_agents`: sessions that had started and not yet finished their last turn at any
  time in the window.

Window 0 starts at the first arrival (0 on virtual time, where the windows then line up
with the SNIC series'), the last one holds the last token. The length is bounded by the
run's emulated time / WINDOW_S, not by its turns; computed once at the end in O(turns).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np
import numpy.typing as npt

from dualpath.model.entities.metrics import RequestLog, RequestRecord
from dualpath.report.plots import WINDOW_S

F64 = npt.NDArray[np.float64]


def timeline(reqs: Collection[RequestRecord], window_s: float = WINDOW_S) -> dict[str, Any]:
    if not reqs:
        return {"window_s": window_s, "windows": 0, "prompt_tps": [], "ttft_mean_s": [],
                "running_agents": []}  # fmt: skip
    arrival = float_column(reqs, "arrival")
    origin = float(arrival.min())
    arrival -= origin
    first = float_column(reqs, "t_first") - origin
    prompt = float_column(reqs, "prompt")
    end = float(float_column(reqs, "t_last").max()) - origin
    n = max(1, math.ceil(end / window_s))
    tps = np.bincount(_window(first, window_s, n), weights=prompt, minlength=n) / window_s
    at = _window(arrival, window_s, n)
    ttft_sum = np.bincount(at, weights=first - arrival, minlength=n)
    count = np.bincount(at, minlength=n)
    ttft = [round(float(s / c), 4) if c else None for s, c in zip(ttft_sum, count, strict=True)]
    return {
        "window_s": window_s,
        "windows": n,
        "prompt_tps": tps.round(1).tolist(),
        "ttft_mean_s": ttft,
        "running_agents": _running(reqs, origin, window_s, n).tolist(),
    }


def float_column(reqs: Collection[RequestRecord], name: str) -> F64:
    """One field of every record as float64 (a copy): straight from a `RequestLog`'s column,
    without building a record per row."""
    if isinstance(reqs, RequestLog):
        return np.array(reqs.column(name), dtype=np.float64)
    return np.fromiter((getattr(r, name) for r in reqs), np.float64, len(reqs))


def int_column(reqs: Collection[RequestRecord], name: str) -> npt.NDArray[np.int64]:
    """The same for an integer field, as int64."""
    if isinstance(reqs, RequestLog):
        return np.array(reqs.column(name), dtype=np.int64)
    return np.fromiter((getattr(r, name) for r in reqs), np.int64, len(reqs))


def _window(t: F64, window_s: float, n: int) -> npt.NDArray[np.int64]:
    return np.clip((t // window_s).astype(np.int64), 0, n - 1)


def _running(
    reqs: Collection[RequestRecord], origin: float, window_s: float, n: int
) -> npt.NDArray[np.int64]:
    """Sessions alive in each window: +1 from the window of a session's first arrival, -1
    after the window of its last token (a difference array, then a running sum)."""
    session = int_column(reqs, "session")
    arrival, t_last = float_column(reqs, "arrival"), float_column(reqs, "t_last")
    # each session's first arrival and last token, vectorized (a per-row loop was a few per
    # cent of a compiled run at 5.2 M turns)
    _, which = np.unique(session, return_inverse=True)
    n_sessions = int(which.max()) + 1 if len(which) else 0
    start = np.full(n_sessions, math.inf)
    end = np.full(n_sessions, -math.inf)
    np.minimum.at(start, which, arrival)
    np.maximum.at(end, which, t_last)
    first = _window(start - origin, window_s, n)
    last = _window(end - origin, window_s, n)
    delta = np.bincount(first, minlength=n + 1) - np.bincount(last + 1, minlength=n + 1)
    running: npt.NDArray[np.int64] = np.cumsum(delta[:n])
    return running
