"""Defensive readers of run reports: a missing key or a failed run gives None, never an
exception, so one odd report cannot lose a whole experiment's summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from dualpath.experiments.base import Report

MISSING = "—"


def pick(report: Mapping[str, Any] | None, path: str) -> Any:
    """`report["a"]["b"]...` for path "a.b...", or None if any step is missing."""
    node: Any = report
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def num(report: Mapping[str, Any] | None, path: str) -> float | None:
    """A finite number at `path`, else None."""
    value = pick(report, path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def failed(report: Mapping[str, Any] | None) -> bool:
    return report is None or "error" in report


def jct(report: Mapping[str, Any] | None) -> float | None:
    return None if failed(report) else num(report, "jct_s")


def div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def vmax(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def vmin(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def fmt(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def cell(report: Mapping[str, Any] | None, value: float | None, digits: int = 0) -> str:
    """A table cell: the value, "failed" for a failed run, — for a missing one."""
    if report is not None and "error" in report:
        return "failed"
    return fmt(value, digits)


def key_figures(report: Report) -> dict[str, float | None]:
    """The few numbers summary.json lists for every run."""
    if failed(report):
        return {}
    pe = num(report, "read_path.pe") or 0.0
    de = num(report, "read_path.de") or 0.0
    return {
        "jct_s": num(report, "jct_s"),
        "wall_s": num(report, "runtime.wall_s"),
        "requests": num(report, "requests.completed"),
        "hit_rate": num(report, "tokens.hit_rate"),
        "de_read_fraction": div(de, pe + de),
        "snic_balance_max_over_avg": num(report, "snic.balance_max_over_avg"),
        "attention_balance_max_over_avg": num(report, "gpu.attention_balance_max_over_avg"),
        "prefill_busy": num(report, "gpu.prefill_busy"),
        "decode_busy": num(report, "gpu.decode_busy"),
    }
