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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dualpath.model.entities.metrics import RequestLog, RequestRecord

F64 = npt.NDArray[np.float64]

STAGES = ("queue", "buffer_wait", "read", "prefill_wait", "transfer", "prefill")
SUB_STAGES = ("queue_pe", "queue_de")  # the two halves of `queue`
TTST_STAGES = ("handover", "h2d", "join_wait", "first_step")


def _summary(values: F64) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    if a.size == 0 or np.isnan(a).any():
        return {"mean": None, "p50": None, "p99": None}
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
    }


def _means(
    cols: Mapping[str, F64], names: Sequence[str], rows: npt.NDArray[np.bool_]
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in names:
        a = cols[k][rows]
        out[k] = None if a.size == 0 or np.isnan(a).any() else float(a.mean())
    return out


def ttft_breakdown(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """`stages` {stage: mean, p50, p99}, `ttft_s` (the same for TTFT: the stage means add up
    to its mean), `share` (each stage's share of the mean TTFT), `by_path` {read path: stage
    means and turn count}, `n` turns broken down, `split_measured`.

    A row without the scheduling and read stamps (a runtime that did not stamp them, or an
    old ten-field row) is left out; one without forward times has the time after the read
    as one `prefill` stage and `prefill_wait`, `transfer` NaN (their means None)."""
    c = _Columns(records, _TTFT_FIELDS)
    w_pe, w_de, bw, rd = c["wait_pe_s"], c["wait_de_s"], c["buffer_wait_s"], c["read_s"]
    ttft = c["t_first"] - c["arrival"]
    after_read = ttft - (w_pe + w_de + bw + rd)  # KV in the buffer -> first token
    fwd, load = c["forward_s"], c["load_wait_s"]
    measured = fwd > 0
    stages = {
        "queue": w_pe + w_de,
        "buffer_wait": bw,
        "read": rd,
        "prefill_wait": np.where(measured, after_read - fwd, np.nan),
        "transfer": np.where(measured, load, np.nan),
        "prefill": np.where(measured, fwd - load, after_read),
        "queue_pe": w_pe,
        "queue_de": w_de,
    }
    keep = np.minimum(np.minimum(w_pe, w_de), np.minimum(bw, rd)) >= 0
    out = _breakdown(c, keep, stages, ttft, STAGES, "ttft_s")
    # every row had the forward times that split the time after the read (a NaN in any
    # row leaves the stage's mean None)
    out["split_measured"] = out["n"] > 0 and out["stages"]["transfer"]["mean"] is not None
    return out


def ttst_breakdown(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Like `ttft_breakdown`, for the TTST: `stages`, `ttst_s`, `share`, `by_path`, `n`.
    Turns of one token (no second token) and rows without the DE's stamps are left out."""
    c = _Columns(records, _TTST_FIELDS)
    ho, h2d, jw = c["handover_s"], c["h2d_s"], c["join_wait_s"]
    ttst = c["t_second"] - c["t_first"]
    stages = {"handover": ho, "h2d": h2d, "join_wait": jw, "first_step": ttst - (ho + h2d + jw)}
    keep = (c["gen"] >= 2) & (np.minimum(np.minimum(ho, h2d), jw) >= 0)
    return _breakdown(c, keep, stages, ttst, TTST_STAGES, "ttst_s")


_TTFT_FIELDS = ("arrival", "t_first", "wait_pe_s", "wait_de_s", "buffer_wait_s", "read_s",
                "forward_s", "load_wait_s")  # fmt: skip
_TTST_FIELDS = ("gen", "t_first", "t_second", "handover_s", "h2d_s", "join_wait_s")


class _Columns:
    """The fields a breakdown reads, one float64 array each, and every row's read path:
    a `RequestLog`'s own columns (no record a row: 48P96D has 5.2 M turns), or gathered
    from any other records. Every stage is then one array operation over the rows, the
    same IEEE operations in the same order as on one record."""

    def __init__(self, records: Iterable[RequestRecord], names: Sequence[str]) -> None:
        self.arrays: dict[str, F64] = {}
        if isinstance(records, RequestLog):
            for name in names:
                self.arrays[name] = np.asarray(records.column(name), dtype=np.float64)
            codes, self.paths = records.path_codes()
            self.codes = np.asarray(codes, dtype=np.int64)
            return
        recs = list(records)
        for name in names:
            self.arrays[name] = np.fromiter((getattr(r, name) for r in recs), np.float64, len(recs))
        self.paths = sorted({r.path for r in recs})
        at = {p: k for k, p in enumerate(self.paths)}
        self.codes = np.fromiter((at[r.path] for r in recs), np.int64, len(recs))

    def __getitem__(self, name: str) -> F64:
        return self.arrays[name]


def _breakdown(
    c: _Columns,
    keep: npt.NDArray[np.bool_],
    stages: dict[str, F64],
    totals: F64,
    names: Sequence[str],
    total_key: str,
) -> dict[str, Any]:
    cols = {k: v[keep] for k, v in stages.items()}
    kept = totals[keep]
    n = int(kept.size)
    summaries = {k: _summary(col) for k, col in cols.items()}
    mean_total = float(np.mean(kept)) if n else 0.0
    share = {
        k: (s["mean"] / mean_total if s["mean"] is not None and mean_total > 0 else None)
        for k, s in summaries.items()
        if k in names
    }
    codes = c.codes[keep]
    by_path: dict[str, dict[str, Any]] = {}
    for code, path in sorted(enumerate(c.paths), key=lambda cp: cp[1]):
        rows = codes == code
        count = int(np.count_nonzero(rows))
        if count:
            by_path[path] = {"n": count, "mean": _means(cols, names, rows)}
    return {"stages": summaries, total_key: _summary(kept), "share": share,
            "by_path": by_path, "n": n}  # fmt: skip
