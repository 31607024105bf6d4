"""DualPath Table 1 (cache-compute ratio) and Fig. 3-right (throughput vs batch) from profiles.

Backs `dualpath roofline [--json]`: `roofline_table()` returns JSON-ready rows,
`render_table()` turns them into a rich Table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from dualpath.model.roofline.model import Roofline
from dualpath.model.roofline.profiles import load_gpu, load_model, model_names

TABLE1_CONTEXTS = (16384, 32721, 65536)  # 16K, the trace mean "32.7K" (Table 2), 64K
TABLE1_APPEND = 429  # paper Table 1 caption / Table 2 64K mean append

# Paper Table 1 ranges (16K–64K) and the point values it states (P §3; docs/sources.md#table-1).
PAPER_RANGE: dict[str, str] = {
    "qwen2.5-32b": "117–267",
    "deepseek-v3.2": "13–36",
    "deepseek-v3": "4.8–5.8",
}
PAPER_POINTS: dict[str, dict[int, float]] = {
    "qwen2.5-32b": {16384: 117.0, 65536: 267.0},
    "deepseek-v3.2": {16384: 13.0, 32721: 22.0, 65536: 36.0},
    "deepseek-v3": {16384: 4.8, 65536: 5.8},
}

FIG3_BATCHES = (1, 2, 5, 10, 20)


def roofline_table(
    models: Sequence[str] | None = None,
    contexts: Sequence[int] = TABLE1_CONTEXTS,
    append: int = TABLE1_APPEND,
) -> list[dict[str, Any]]:
    """One row per (model, context): our GB/PFLOP next to the paper's value where stated."""
    gpu = load_gpu("h800")  # the ratio is hardware-independent; any GPU will do
    rows: list[dict[str, Any]] = []
    for name in models if models is not None else model_names():
        rl = Roofline(load_model(name), gpu, 1)
        for ctx in contexts:
            rows.append(
                {
                    "model": name,
                    "context": ctx,
                    "append": append,
                    "gb_per_pflop": round(rl.cache_compute_ratio(ctx, append), 2),
                    "paper": PAPER_POINTS.get(name, {}).get(ctx),
                    "paper_range": PAPER_RANGE.get(name),
                }
            )
    return rows


def render_table(rows: Sequence[dict[str, Any]]) -> Table:
    """Rich table of `roofline_table()` rows (paper columns blank where not stated)."""
    table = Table(title="Cache-compute ratio (DualPath Table 1), GB of KV per PFLOP")
    for col, justify in (
        ("model", "left"),
        ("context", "right"),
        ("append", "right"),
        ("ours", "right"),
        ("paper", "right"),
        ("paper 16K–64K", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        paper = r.get("paper")
        table.add_row(
            str(r["model"]),
            f"{r['context']:,}",
            str(r["append"]),
            f"{r['gb_per_pflop']:.1f}",
            "" if paper is None else f"{paper:g}",
            r.get("paper_range") or "",
        )
    return table


def batch_throughput(
    rl: Roofline,
    batches: Sequence[int] = FIG3_BATCHES,
    context: int = 30_000,
    append: int = 300,
) -> dict[int, float]:
    """Prefill throughput relative to batch 1 (Fig. 3 right: 30K context + 300 appended)."""
    tps = {b: b * append / rl.prefill_time([(context, append)] * b) for b in batches}
    base = append / rl.prefill_time([(context, append)])
    return {b: t / base for b, t in tps.items()}
