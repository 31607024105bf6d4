"""`TraceError` and the field checks every loader shares.

A message names where the bad value is (`trace_0002.json.xz: requests[17].in`,
`synthetic_trace.jsonl:12: input_length`), what was found and what is accepted, so a
broken trace is fixed from the message alone. Loaders raise before returning anything:
a workload is either wholly loaded or not at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_MISSING = object()


class TraceError(ValueError):
    """A trace that cannot be loaded: missing, unreadable, malformed or inconsistent."""


def shown(value: Any) -> str:
    """A short repr for messages (a 2,000-id list must not flood the terminal)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def need_int(obj: Mapping[str, Any], key: str, where: str, *, minimum: int) -> int:
    """obj[key] as an int >= minimum (bools are not numbers here)."""
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        raise TraceError(f"{where}{key}: missing (an integer >= {minimum} is required)")
    if type(value) is not int or value < minimum:
        raise TraceError(f"{where}{key}: expected an integer >= {minimum}, got {shown(value)}")
    return value


def need_time(obj: Mapping[str, Any], key: str, where: str) -> float:
    value = opt_time(obj, key, where)
    if value is None:
        raise TraceError(f"{where}{key}: missing (a number >= 0 is required)")
    return value


def opt_time(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    """obj[key] as a finite number >= 0, or None when the key is absent."""
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        return None
    ok = type(value) in (int, float) and math.isfinite(value) and value >= 0
    if not ok:
        raise TraceError(f"{where}{key}: expected a finite number >= 0, got {shown(value)}")
    return float(value)


def need_list(obj: Mapping[str, Any], key: str, where: str, what: str) -> list[Any]:
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        raise TraceError(f"{where}{key}: missing ({what} is required)")
    if type(value) is not list:
        raise TraceError(f"{where}{key}: expected {what}, got {shown(value)}")
    return value


def need_object(value: Any, where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise TraceError(f"{where}: expected a JSON object, got {shown(value)}")
    return value


def check_ids(ids: list[Any], where: str) -> None:
    """Every element an int (run on ids not seen before: each distinct value once)."""
    bad = next((x for x in ids if type(x) is not int), _MISSING)
    if bad is not _MISSING:
        raise TraceError(f"{where}hash_ids: expected a list of integers, found {shown(bad)}")


def check_scale(time_scale: float) -> None:
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise TraceError(f"time_scale: expected a finite number > 0, got {time_scale!r}")
