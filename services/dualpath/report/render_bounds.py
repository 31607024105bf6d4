"""The report's `bounds` as Markdown: one short table a reader can paste (report/bounds.py)."""

from __future__ import annotations

from typing import Any

_WHAT = {
    "floor": "longest agent alone, idle cluster",
    "prefill": "prefill compute, all prefilled tokens",
    "decode": "decode compute, all decoded tokens",
    "storage_read": "storage reads per path over its SNICs",
    "cnic": "compute-network bytes over all CNICs",
}
_STAGES = ("scheduling", "allocating", "reading", "prefill")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.0f} %"


def _detail(k: str, row: dict[str, Any]) -> str:
    if k == "prefill":
        return (f"{row['tokens']:,} tokens; batch {row['batch_requests']} req / "
                f"{row['batch_tokens']:,} tok ({row['batch_limit']})")  # fmt: skip
    if k == "decode":
        return f"{row['tokens']:,} tokens; batch {row['batch']} per GPU ({row['batch_limit']})"
    if k == "storage_read":
        p = row["by_path"]
        return (f"PE {p['pe']['bytes'] / 1e9:,.0f} GB over {p['pe']['snics']}, "
                f"DE {p['de']['bytes'] / 1e9:,.0f} GB over {p['de']['snics']}; "
                f"pooled {row['pooled_s']:,.0f} s")  # fmt: skip
    if k == "cnic":
        return f"{row['bytes'] / 1e9:,.0f} GB"
    return ""


def bounds_lines(report: dict[str, Any]) -> list[str]:
    b = report.get("bounds")
    if not b:
        return []
    lines = [
        "",
        "## Bounds on the JCT",
        "",
        f"JCT {b['jct_s']:,.0f} s; the binding bound is **{b['binding']}** (docs/report.md).",
        "",
        "| bound | s | JCT / bound | what | detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k, what in _WHAT.items():
        row = b[k]
        if row.get("bypassed"):
            lines.append(f"| {k} | – | – | {what} | bypassed (Oracle); {_detail(k, row)} |")
            continue
        if row["s"] is None:
            continue
        over = "–" if row["jct_over"] is None else f"{row['jct_over']:.2f}"
        lines.append(f"| {k} | {row['s']:,.0f} | {over} | {what} | {_detail(k, row)} |")
    stages = b.get("ttft_stages")
    if stages:
        lines += _stage_lines(stages)
    return lines


def _stage_lines(st: dict[str, Any]) -> list[str]:
    paper = st["paper"]
    lines = [
        "",
        f"TTFT shares at APS {st['aps']:g} (paper Fig. 12 left: Sch., A., R., PF.):",
        "",
        "| stage | ours | paper |",
        "| --- | --- | --- |",
    ]
    for k in _STAGES:
        theirs = paper["share"].get(k) if paper and paper["share"] else None
        lines.append(f"| {k} | {_pct(st['share'][k])} | {_pct(theirs)} |")
    if paper:
        series = " → ".join(_pct(x) for x in paper["basic_scheduling_by_aps_group"])
        lines += ["", f"Paper, Basic's scheduling share over its APS groups: {series} "
                  f"(the last at APS 0.25; {paper['source']})."]  # fmt: skip
    return lines
