"""Per-turn TTFT breakdown (report key `ttft_breakdown`; paper Fig. 12 left).

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

`prefill_wait`, `transfer` and `prefill` need the prefill engine's forward times, which only
the one-process runtime records (the process runtime's scheduler does not receive them);
without them the three are reported together as `prefill` and the others are null.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dualpath.model.entities.metrics import RequestRecord

STAGES = ("queue", "buffer_wait", "read", "prefill_wait", "transfer", "prefill")
SUB_STAGES = ("queue_pe", "queue_de")  # the two halves of `queue`
_SPLIT = ("prefill_wait", "transfer")  # need the prefill engine's forward times


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


def _means(rows: Sequence[dict[str, float]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in STAGES:
        a = np.asarray([row[k] for row in rows], dtype=float)
        out[k] = None if a.size == 0 or np.isnan(a).any() else float(a.mean())
    return out


def ttft_breakdown(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """`stages` {stage: mean, p50, p99}, `ttft_s` (the same for TTFT: the stage means add up
    to its mean), `share` (each stage's share of the mean TTFT), `by_path` {read path: stage
    means and turn count}, `n` turns broken down, `split_measured`."""
    rows: list[dict[str, float]] = []
    paths: dict[str, list[dict[str, float]]] = {}
    ttfts: list[float] = []
    for r in records:
        st = stage_times(r)
        if st is None:
            continue
        rows.append(st)
        ttfts.append(r.t_first - r.arrival)
        paths.setdefault(r.path, []).append(st)
    split = bool(rows) and not any(np.isnan(row["transfer"]) for row in rows)
    stages = {k: _summary([row[k] for row in rows]) for k in (*STAGES, *SUB_STAGES)}
    mean_ttft = float(np.mean(ttfts)) if ttfts else 0.0
    share = {
        k: (s["mean"] / mean_ttft if s["mean"] is not None and mean_ttft > 0 else None)
        for k, s in stages.items()
        if k in STAGES
    }
    return {
        "stages": stages,
        "ttft_s": _summary(ttfts),
        "share": share,
        "by_path": {p: {"n": len(v), "mean": _means(v)} for p, v in sorted(paths.items())},
        "n": len(rows),
        "split_measured": split,
    }
