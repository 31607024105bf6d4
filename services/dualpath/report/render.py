"""Human views of a report: a terminal summary table and a Markdown page."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _ms(d: dict[str, float]) -> str:
    return f"{d['p50'] * 1e3:.0f} / {d['p90'] * 1e3:.0f} / {d['p99'] * 1e3:.0f} ms"


def _rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    sc = r["scenario"]
    topo = sc["topology"]
    head = [
        ("scenario", f"{sc['name']}: {sc['model']} on {sc['gpu']}, "
         f"{topo['prefill_nodes']}P{topo['decode_nodes']}D x {topo['gpus_per_node']} GPUs"),
        ("policy", r["policy"]["name"]),
    ]  # fmt: skip
    mode = _online_rows(r["online"]) if "online" in r else _offline_rows(r)
    return [*head, *mode, *_common_rows(r)]


def _offline_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    sc = r["scenario"]
    w = r.get("workload")
    sessions = w["sessions"] if w is not None else sc["workload"]["agents"]
    rows = [("workload", w["description"])] if w is not None and w["source"] != "synthetic" else []
    return [
        *rows,
        ("agents / turns", f"{sessions} / {r['requests']['completed']}"),
        ("JCT (emulated)", f"{r['jct_s']:.1f} s"),
    ]


def _online_rows(o: dict[str, Any]) -> list[tuple[str, str]]:
    w = o["window"]
    verdict = "met" if o["slo_met"] else "MISSED"
    return [
        ("online APS / agents", f"{o['aps']:g} / {o['agents_arrived']} arrived"),
        ("stop", f"{o['stop_reason']} at {o['stop_time_s']:.0f} s"),
        (f"last {o['window_s']:.0f} s: TTFT / TTST / TPOT mean",
         f"{w['ttft_s']['mean']:.3f} s / {w['ttst_s']['mean']:.3f} s / "
         f"{w['tpot_s']['mean'] * 1e3:.1f} ms (SLO {verdict})"),
    ]  # fmt: skip


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
        ("runtime", f"{rt['kind']}, {rt['wall_s']:.1f} s wall, "
         f"{rt['emulated_per_wall']:.0f} emulated s per wall s, lag p99 {rt['lag_p99_s']:.3f} s"),
    ]  # fmt: skip


def _runtime_note(rt: dict[str, Any]) -> str:
    if rt["dilation"] is None:
        return (
            f"runtime: {rt['kind']} time, every event runs at its exact emulated time, "
            f"so lag is {rt['lag_p99_s']} s"
        )
    return (
        f"runtime: {rt['kind']}, dilation {rt['dilation']} emulated s per wall s, "
        f"measured lag p99 {rt['lag_p99_s']} s"
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
    return "\n".join(lines) + "\n"


def _hit_row(r: dict[str, Any]) -> str:
    """The measured hit, and beside it a trace's own unbounded-cache figure when replayed."""
    row = f"{r['tokens']['hit_rate'] * 100:.1f} %"
    trace = r.get("workload", {}).get("trace_hit_rate")
    return row if trace is None else f"{row} (trace, unbounded cache: {trace * 100:.1f} %)"
