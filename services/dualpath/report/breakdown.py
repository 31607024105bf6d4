"""Per-turn TTFT and TTST breakdowns (report keys `ttft_breakdown`, `ttst_breakdown`; the
TTFT one is the paper's Fig. 12 left).

A turn's TTFT (arrival -> first token, sampled by the PE) is cut into six stages that add
up to it exactly, from the durations each `RequestRecord` carries:

- queue: arrival -> a PE and a DE assigned (the paper's "Sch."; `queue_pe` + `queue_de`);
- buffer_wait: DE assigned -> DRAM buffer space held, the storage read starts ("A.");
- read: storage -> the reading node's DRAM buffer ("R.");
- prefill_wait: KV in the buffer -> the turn's first prefill forward starts, plus gaps
  between the forwards of a chunked prompt;
- transfer: forward time stalled on hit KV reaching PE HBM, over the compute network from
  the DE buffer (DE-path reads: the PE<->DE transfer) or from the PE's own buffer (PE path);
- prefill: the rest of the forwards, roofline compute and its expert all-to-all ("PF.").

`prefill_wait`, `transfer` and `prefill` need the prefill engine's forward times (both
runtimes record them); a record without them has the three reported together as `prefill`
and the others null.

The TTST (first token -> second, turns of two or more tokens) is cut the same way into
`TTST_STAGES`: handover (the last layers' prompt KV reaches the DE buffer, the DE is told),
h2d (DE buffer -> DE HBM), join_wait (until the decode chunk it joins starts) and
first_step (that chunk's first step: the rest).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dualpath.model.entities.metrics import RequestRecord

STAGES = ("queue", "buffer_wait", "read", "prefill_wait", "transfer", "prefill")
SUB_STAGES = ("queue_pe", "queue_de")  # the two halves of `queue`
_SPLIT = ("prefill_wait", "transfer")  # need the prefill engine's forward times
TTST_STAGES = ("handover", "h2d", "join_wait", "first_step")


def stage_times(r: RequestRecord) -> dict[str, float] | None:
    """The turn's stages in emulated seconds (summing to its TTFT), or None when its
    runtime did not stamp the scheduling and read stages."""
    early = (r.wait_pe_s, r.wait_de_s, r.buffer_wait_s, r.read_s)
    if min(early) < 0:
        return None
    ttft = r.t_first - r.arrival
    after_read = ttft - sum(early)  # KV in the buffer -> first token
    if r.forward_s > 0:
        wait, transfer, prefill = after_read - r.forward_s, r.load_wait_s, r.forward_s
        prefill -= r.load_wait_s
    else:  # forward times not measured: one undivided stage
        wait, transfer, prefill = float("nan"), float("nan"), after_read
    return {
        "queue": r.wait_pe_s + r.wait_de_s,
        "buffer_wait": r.buffer_wait_s,
        "read": r.read_s,
        "prefill_wait": wait,
        "transfer": transfer,
        "prefill": prefill,
        "queue_pe": r.wait_pe_s,
        "queue_de": r.wait_de_s,
    }


def _summary(values: Sequence[float]) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    if a.size == 0 or np.isnan(a).any():
        return {"mean": None, "p50": None, "p99": None}
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
    }


def _means(cols: Mapping[str, Sequence[float]], names: Sequence[str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in names:
        a = np.asarray(cols[k], dtype=float)
        out[k] = None if a.size == 0 or np.isnan(a).any() else float(a.mean())
    return out


def ttft_breakdown(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """`stages` {stage: mean, p50, p99}, `ttft_s` (the same for TTFT: the stage means add up
    to its mean), `share` (each stage's share of the mean TTFT), `by_path` {read path: stage
    means and turn count}, `n` turns broken down, `split_measured`."""
    out = _breakdown(records, stage_times, _ttft, STAGES, SUB_STAGES, "ttft_s")
    # every row had the forward times that split the time after the read (a NaN in any
    # row leaves the stage's mean None)
    out["split_measured"] = out["n"] > 0 and out["stages"]["transfer"]["mean"] is not None
    return out


def ttst_stage_times(r: RequestRecord) -> dict[str, float] | None:
    """The turn's TTST (first token -> second) in emulated seconds, in `TTST_STAGES`; None
    for a turn of one generated token (no second token) or a row without the DE's stamps."""
    if r.gen < 2:
        return None
    early = (r.handover_s, r.h2d_s, r.join_wait_s)
    if min(early) < 0:
        return None
    ttst = r.t_second - r.t_first
    return {
        "handover": r.handover_s,
        "h2d": r.h2d_s,
        "join_wait": r.join_wait_s,
        "first_step": ttst - sum(early),
    }


def ttst_breakdown(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Like `ttft_breakdown`, for the TTST: `stages`, `ttst_s`, `share`, `by_path`, `n`."""
    return _breakdown(records, ttst_stage_times, _ttst, TTST_STAGES, (), "ttst_s")


def _ttft(r: RequestRecord) -> float:
    return r.t_first - r.arrival


def _ttst(r: RequestRecord) -> float:
    return r.t_second - r.t_first


def _breakdown(
    records: Iterable[RequestRecord],
    times: Callable[[RequestRecord], dict[str, float] | None],
    total: Callable[[RequestRecord], float],
    names: Sequence[str],
    sub: Sequence[str],
    total_key: str,
) -> dict[str, Any]:
    # Columns of 8-byte floats, not a dict per turn: 48P96D has 5.2 M turns, and a dict
    # each (≈ 640 bytes) made this the run's peak memory.
    cols = {k: array("d") for k in (*names, *sub)}
    paths: dict[str, dict[str, array[float]]] = {}
    totals = array("d")
    n = 0
    for r in records:
        st = times(r)
        if st is None:
            continue
        n += 1
        for k, col in cols.items():
            col.append(st[k])
        totals.append(total(r))
        by_path = paths.get(r.path)
        if by_path is None:
            by_path = paths[r.path] = {k: array("d") for k in names}
        for k in names:
            by_path[k].append(st[k])
    stages = {k: _summary(col) for k, col in cols.items()}
    mean_total = float(np.mean(totals)) if totals else 0.0
    share = {
        k: (s["mean"] / mean_total if s["mean"] is not None and mean_total > 0 else None)
        for k, s in stages.items()
        if k in names
    }
    return {
        "stages": stages,
        total_key: _summary(totals),
        "share": share,
        "by_path": {
            p: {"n": len(v[names[0]]), "mean": _means(v, names)} for p, v in sorted(paths.items())
        },
        "n": n,
    }
