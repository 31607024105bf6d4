"""The SLO verdict of a load test (paper §7.4: TTFT <= 4 s and TPOT <= 50 ms).

Same reading as the report's online section (`dualpath.report.online`): the SLO is met when
the MEAN emulated TTFT and the mean emulated TPOT are within their limits; the share of
turns within each limit is reported beside it. Pure: fed with summaries of Locust's EMU
rows, so it works the same in one process and on a distributed master.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Summary:
    """One emulated latency series, in milliseconds."""

    n: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    within: float  # share of samples <= the SLO limit (1.0 when there is no limit)


def share_within(histogram: Mapping[float, int], limit_ms: float) -> float:
    """Share of samples <= limit from a {value: count} histogram (Locust's rounded one)."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    return sum(c for v, c in histogram.items() if v <= limit_ms) / total


def verdict(
    rows: Mapping[str, Summary],
    slo_ttft_s: float,
    slo_tpot_ms: float,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`rows` by EMU name ("TTFT", "TTST", "TPOT", "turn latency")."""
    ttft, tpot = rows.get("TTFT"), rows.get("TPOT")
    has_data = ttft is not None and ttft.n > 0
    met = (
        has_data
        and ttft is not None
        and ttft.mean_ms <= slo_ttft_s * 1000
        and (tpot is None or tpot.n == 0 or tpot.mean_ms <= slo_tpot_ms)
    )
    return {
        "schema": "dualpath.loadgen.slo/v1",
        "slo": {"ttft_s": slo_ttft_s, "tpot_ms": slo_tpot_ms, "on": "mean"},
        "met": bool(met),
        "verdict": "met" if met else ("MISSED" if has_data else "no data"),
        "emulated_ms": {name: asdict(s) for name, s in rows.items()},
        **dict(extra or {}),
    }


def describe(v: Mapping[str, Any]) -> str:
    """One line for the console."""
    slo = v["slo"]
    rows = v["emulated_ms"]
    head = f"SLO (mean TTFT <= {slo['ttft_s']:g} s, mean TPOT <= {slo['tpot_ms']:g} ms): "
    if v["verdict"] == "no data":
        return head + "no data (no turn finished)"
    parts = [head + v["verdict"]]
    for name, unit in (("TTFT", 1000.0), ("TPOT", 1.0)):
        r = rows.get(name)
        if r and r["n"]:
            scale = "s" if unit == 1000.0 else "ms"
            parts.append(
                f"{name} mean {r['mean_ms'] / unit:.3g} {scale}, p90 {r['p90_ms'] / unit:.3g} "
                f"{scale}, {100 * r['within']:.1f}% of {r['n']} turns within"
            )
    return "; ".join(parts)
