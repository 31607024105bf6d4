"""Human views of a report: a terminal summary table and a Markdown page."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from dualpath.report.render_bounds import bounds_lines

SIG_DIGITS = 3  # a figure in a report: what a reader compares, not the float's noise


def _sig(x: float, digits: int = SIG_DIGITS) -> str:
    """`x` to `digits` significant digits, without an exponent (12.5, 0.0125, 1234)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def _duration(s: float) -> str:
    """Seconds in the unit a reader expects: `10.7 ms` below a second, `2.35 s` above."""
    if s != 0 and abs(s) < 1:
        return f"{_sig(s * 1e3)} ms"
    return f"{_sig(s)} s"


def _ms(d: dict[str, float]) -> str:
    return f"{d['p50'] * 1e3:.0f} / {d['p90'] * 1e3:.0f} / {d['p99'] * 1e3:.0f} ms"


def _rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    sc = r["scenario"]
    topo = sc["topology"]
    head = [
        ("scenario", f"{sc['name']}: {sc['model']} on {sc['gpu']}, "
         f"{topo['prefill_nodes']}P{topo['decode_nodes']}D x {topo['gpus_per_node']} GPUs"),
        ("policy", r["policy"]["name"]),
        *_fetch_rows(sc),
    ]  # fmt: skip
    mode = _online_rows(r["online"]) if "online" in r else _offline_rows(r)
    return [*head, *mode, *_common_rows(r)]


# When a PE group takes new work shapes every TTFT (docs/fidelity.md, "When a PE group fetches").
_FETCH = {
    "per-forward": "per-forward: a PE group in a forward takes new work when it ends",
    "on-change": "on-change: within {ms:g} ms of a change, also during a forward",
    "periodic": "periodic: every {ms:g} ms",
}


def _fetch_rows(sc: dict[str, Any]) -> list[tuple[str, str]]:
    engine = sc.get("engine", {})
    text = _FETCH.get(engine.get("fetch_mode", ""))
    if text is None:  # a report from before the setting
        return []
    return [("PE fetch", text.format(ms=engine.get("fetch_interval_ms", 5.0)))]


def _offline_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    sc = r["scenario"]
    w = r.get("workload")
    sessions = w["sessions"] if w is not None else sc["workload"]["agents"]
    rows = [("workload", w["description"])] if w is not None and w["source"] != "synthetic" else []
    return [
        *rows,
        ("agents / turns", f"{sessions} / {r['requests']['completed']}"),
        ("JCT (emulated)", f"{r['jct_s']:.1f} s"),
        *_floor_rows(r),
    ]


def _floor_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The JCT floor (report/floor.py), when the report has one."""
    if r.get("jct_floor_s") is None:
        return []
    f = r["jct_floor"]
    tol = f"{f['tolerance']:.0%}"
    verdict = f"within {tol}: one agent's critical path" if r["jct_floor_bound"] else f"> {tol}"
    return [
        ("JCT floor (one agent, idle cluster)",
         f"{r['jct_floor_s']:.1f} s ({f['agent']}, {f['turns']} turns); JCT / floor "
         f"{f['jct_over_floor']:.2f} ({verdict})"),
    ]  # fmt: skip


def _online_rows(o: dict[str, Any]) -> list[tuple[str, str]]:
    w = o["window"]
    verdict = "met" if o["slo_met"] else "MISSED"
    return [
        ("online APS / agents", f"{o['aps']:g} / {o['agents_arrived']} arrived"),
        ("stop", f"{o['stop_reason']} at {o['stop_time_s']:.0f} s"),
        (f"last {o['window_s']:.0f} s: TTFT / TTST / TPOT mean",
         f"{w['ttft_s']['mean']:.3f} s / {w['ttst_s']['mean']:.3f} s / "
         f"{w['tpot_s']['mean'] * 1e3:.1f} ms (SLO {verdict})"),
        *_trajectory_rows(o),
    ]  # fmt: skip


def _trajectory_rows(o: dict[str, Any]) -> list[tuple[str, str]]:
    """Paper Fig. 11's metric; older reports have no such field."""
    j = o.get("trajectory_jct_s")
    rows: list[tuple[str, str]] = []
    if j and j["n"]:
        rows.append(
            ("trajectory JCT mean / p50 / p90",
             f"{j['mean']:.0f} / {j['p50']:.0f} / {j['p90']:.0f} s "
             f"({o['trajectories_completed']} of {o['agents_arrived']} ran every turn)"),
        )  # fmt: skip
    rebuilt = o.get("trajectory_jct_from_turns_s")
    if rebuilt is not None:
        turn = o["window"]["turn_s"]["mean"]
        rows.append(
            ("trajectory JCT from turns",
             f"{rebuilt:.0f} s ({o['turns_per_trajectory']:.1f} turns × {turn:.2f} s, "
             f"the last {o['window_s']:.0f} s's mean turn)"),
        )  # fmt: skip
    return rows


def _common_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    lat = r["latency"]
    snic, gpu, integ, rt = r["snic"], r["gpu"], r["integrity"], r["runtime"]
    paths = r["read_path"]
    return [
        ("TTFT p50/p90/p99", _ms(lat["ttft_s"])),
        ("TTST p50/p90/p99", _ms(lat["ttst_s"])),
        ("TPOT p50/p90/p99", _ms(lat["tpot_s"])),
        ("hit rate", _hit_row(r)),
        ("read path PE / DE", f"{paths['pe']} / {paths['de']}"),
        ("SNIC max/avg", f"{snic['balance_max_over_avg']:.2f}"),
        ("GPU busy P / D", f"{gpu['prefill_busy'] * 100:.0f} % / {gpu['decode_busy'] * 100:.0f} %"),
        ("attention max/avg (first 5%)", f"{gpu['attention_balance_max_over_avg']:.2f}"),
        ("blocks read / persisted", f"{integ['blocks_read']} / {integ['blocks_persisted']}"),
        ("lost / corrupted", f"{integ['blocks_lost']} / {integ['blocks_corrupted']}"),
        ("conservation", "ok" if integ["conservation_ok"] else "VIOLATED"),
        *_tier_rows(r),
        ("runtime", f"{rt['kind']}{', compiled' if rt.get('compiled') else ''}, "
         f"{rt['wall_s']:.1f} s wall, "
         f"{rt['emulated_per_wall']:.0f} emulated s per wall s, "
         f"lag p99 {_duration(rt['lag_p99_s'])}"),
        *_work_rows(r),
    ]  # fmt: skip


def _work_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """What the simulator did a turn (virtual time; docs/native.md): flows, re-shares, link
    recomputations, decode chunks. Counted, so the same on any host, unlike the wall time."""
    rt, turns = r["runtime"], r["requests"]["completed"]
    if rt.get("reshares") is None or not turns:
        return []
    parts = (
        f"{rt['flows'] / turns:.1f} flows, {rt['reshares'] / turns:.1f} re-shares, "
        f"{rt['link_recomputations'] / turns:.1f} link recomputations, "
        f"{r['gpu']['decode_chunks'] / turns:.2f} decode chunks"
    )
    return [("simulator work a turn", parts)]


def _tier_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The DRAM tier's share of the hit (docs/tier.md): only when the tier is on."""
    t = r.get("tier")
    if t is None:
        return []
    share = t["hit_share"]
    parts = " / ".join(f"{share[k] * 100:.1f} %" for k in ("local_dram", "remote_dram", "storage"))
    return [
        ("hit from DRAM local / remote / storage", parts),
        ("tier evictions (blocks / sessions)", f"{t['evicted_blocks']} / {t['evicted_sessions']}"),
    ]


def _runtime_note(rt: dict[str, Any]) -> str:
    if rt["dilation"] is None:
        return (
            f"runtime: {rt['kind']} time, every event runs at its exact emulated time, "
            f"so lag is {_duration(rt['lag_p99_s'])}"
        )
    return (
        f"runtime: {rt['kind']}, dilation {rt['dilation']:g} emulated s per wall s, "
        f"measured lag p99 {_duration(rt['lag_p99_s'])}"
    )


def summary_table(report: dict[str, Any]) -> Table:
    table = Table(title="DualPath testbed run (all times emulated)", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value")
    for k, v in _rows(report):
        table.add_row(k, v)
    return table


def markdown_report(report: dict[str, Any], png_name: str | None = None) -> str:
    lines = [
        "# DualPath testbed run",
        "",
        f"All times are emulated seconds ({_runtime_note(report['runtime'])}).",
        "",
        "| metric | value |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {v} |" for k, v in _rows(report)]
    if png_name:
        lines += ["", f"![SNIC read throughput per node and latency CDFs]({png_name})"]
    lines += [
        "",
        "## SNIC per node",
        "",
        "| node | read util | write util | GB read |",
        "| --- | --- | --- | --- |",
    ]
    for node, s in report["snic"]["per_node"].items():
        lines.append(
            f"| {node} | {s['read_util'] * 100:.1f} % | {s['write_util'] * 100:.1f} % | "
            f"{s['bytes_read'] / 1e9:.1f} |"
        )
    lines += [
        "",
        "## CNIC bytes by virtual lane",
        "",
        "| VL | GB | utilisation |",
        "| --- | --- | --- |",
    ]
    cnic = report["cnic"]
    for vl, b in cnic["bytes_by_vl"].items():
        lines.append(f"| {vl} | {b / 1e9:.1f} | {cnic['util_by_vl'][vl] * 100:.2f} % |")
    lines += _breakdown_lines(report, png_name)
    lines += _ttst_lines(report)
    lines += bounds_lines(report)
    return "\n".join(lines) + "\n"


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _breakdown_lines(report: dict[str, Any], png_name: str | None) -> list[str]:
    """Per-turn TTFT breakdown (report/breakdown.py), when the report has one."""
    b = report.get("ttft_breakdown")
    if not b or not b["n"]:
        return []
    from dualpath.report.breakdown import STAGES
    from dualpath.report.plots import breakdown_png_name, timeline_png_name

    lines = [
        "",
        "## TTFT breakdown per turn",
        "",
        f"{b['n']} turns, emulated seconds; the stage means add up to the mean TTFT.",
        "",
        *_stage_table(b, STAGES, "ttft"),
    ]
    if not b["split_measured"]:
        lines += ["", "(these records have no prefill forward times: prefill_wait and "
                  "transfer are inside prefill)"]  # fmt: skip
    if png_name:
        lines += ["", f"![TTFT breakdown]({breakdown_png_name(png_name)})"]
        if report.get("timeline", {}).get("windows"):
            lines += ["", f"![prompt TPS, TTFT and running agents over time]"
                      f"({timeline_png_name(png_name)})"]  # fmt: skip
    return lines


def _stage_table(b: dict[str, Any], stages: tuple[str, ...], total: str) -> list[str]:
    """A breakdown's stages as table rows, its total (`ttft` / `ttst`) last."""
    rows = [
        f"| stage | mean | p50 | p99 | share of mean {total.upper()} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in (*stages, total):
        st = b[f"{total}_s"] if k == total else b["stages"][k]
        share = 1.0 if k == total else b["share"][k]
        pct = "–" if share is None else f"{share * 100:.1f} %"
        rows.append(f"| {k} | {_s(st['mean'])} | {_s(st['p50'])} | {_s(st['p99'])} | {pct} |")
    return rows


def _ttst_lines(report: dict[str, Any]) -> list[str]:
    """Per-turn TTST breakdown (report/breakdown.py), when the report has one."""
    b = report.get("ttst_breakdown")
    if not b or not b["n"]:
        return []
    from dualpath.report.breakdown import TTST_STAGES

    lines = [
        "",
        "## TTST breakdown per turn",
        "",
        f"{b['n']} turns of two or more tokens, emulated seconds; the stage means add up to "
        "the mean TTST (first token -> second). handover: the prompt KV's last layers reach "
        "the DE buffer and the DE is told; h2d: DE buffer -> DE HBM; join_wait: until the "
        "decode chunk it joins starts; first_step: that chunk's first step.",
        "",
        *_stage_table(b, TTST_STAGES, "ttst"),
    ]
    return lines


def _hit_row(r: dict[str, Any]) -> str:
    """The measured hit, and beside it a trace's own unbounded-cache figure when replayed."""
    row = f"{r['tokens']['hit_rate'] * 100:.1f} %"
    trace = r.get("workload", {}).get("trace_hit_rate")
    return row if trace is None else f"{row} (trace, unbounded cache: {trace * 100:.1f} %)"
