"""PNG figures of a run: storage-NIC read throughput per node over time, and latency CDFs;
beside them (`NAME-ttft.png`) the per-turn TTFT breakdown as stacked bars, and
(`NAME-timeline.png`) prompt TPS, TTFT and running agents over time (paper Fig. 15).

Computed from the cluster at the end of a run (the link series), written next to the JSON.
matplotlib runs headless (Agg); nothing here is needed to compute the report itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dualpath.model.engines.cluster import Cluster

WINDOW_S = 10.0


def snic_series(cluster: Cluster, bucket_s: float, jct: float) -> dict[str, list[float]]:
    """GB/s read through each node's SNIC, averaged over WINDOW_S windows."""
    per = max(1, round(WINDOW_S / bucket_s))
    n = max(1, int(np.ceil(jct / WINDOW_S)))
    out: dict[str, list[float]] = {}
    for name, node in cluster.hw.nodes.items():
        raw = np.zeros(n * per)
        s = node.snic_rx.series(bucket_s)[: n * per]
        raw[: len(s)] = s
        out[name] = (raw.reshape(n, per).sum(axis=1) / WINDOW_S / 1e9).round(3).tolist()
    return out


# Up to this many nodes get a line and a legend entry each; beyond it (48P96D has 144) a
# legend cannot fit and the lines cannot be told apart: every node is drawn thin and grey,
# with the mean and the busiest node over them.
LEGEND_NODES = 16


def _snic_panel(ax: Any, series: dict[str, list[float]], window_s: float) -> None:
    if len(series) <= LEGEND_NODES:
        for name, values in series.items():
            ax.plot(np.arange(len(values)) * window_s, values, label=name, linewidth=1)
        ax.legend(fontsize=7, ncol=2)
        return
    width = max(len(v) for v in series.values())
    rows = np.zeros((len(series), width))  # (a node's series may be shorter: zero-padded)
    for k, values in enumerate(series.values()):
        rows[k, : len(values)] = values
    t = np.arange(width) * window_s
    for row in rows:
        ax.plot(t, row, color="0.75", linewidth=0.5)
    ax.plot([], [], color="0.75", linewidth=0.5, label=f"each of {len(series)} nodes")
    ax.plot(t, rows.mean(axis=0), color="C0", linewidth=1.5, label="mean over nodes")
    ax.plot(t, rows.max(axis=0), color="C3", linewidth=1, label="busiest node")
    ax.legend(fontsize=7)


def write_png(report: dict[str, Any], path: Path) -> None:
    """Two panels: SNIC read GB/s per node over time, and TTFT/TPOT CDFs."""
    series: dict[str, list[float]] = report["snic"]["series_gbps"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    _snic_panel(ax1, series, report["snic"]["series_window_s"])
    ax1.set_xlabel("emulated time (s)")
    ax1.set_ylabel(f"SNIC read GB/s ({report['snic']['series_window_s']:.0f} s windows)")
    ax1.set_title(f"storage NICs — max/avg {report['snic']['balance_max_over_avg']:.2f}")
    for key, label in (("ttft_s", "TTFT"), ("ttst_s", "TTST"), ("tpot_s", "TPOT")):
        q = np.asarray(report["latency"][key].get("quantiles", []), dtype=float)
        if q.size and q.max() > 0:
            ax2.plot(q, np.linspace(0, 1, q.size), label=label)
    ax2.set_xscale("log")
    ax2.set_xlabel("emulated seconds")
    ax2.set_ylabel("CDF")
    ax2.set_title("latency")
    ax2.legend()
    sc = report["scenario"]
    fig.suptitle(
        f"{sc['name']} · {sc['model']} · policy {report['policy']['name']} · "
        f"JCT {report['jct_s']:.0f} s (emulated)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    if report.get("ttft_breakdown", {}).get("n"):  # a second file: this figure stays as it was
        write_breakdown_png(report, path.with_name(breakdown_png_name(path.name)))
    if report.get("timeline", {}).get("windows"):
        write_timeline_png(report, path.with_name(timeline_png_name(path.name)))


def breakdown_png_name(png_name: str) -> str:
    """File name of the TTFT-breakdown chart written beside `png_name` (run.png ->
    run-ttft.png)."""
    return _beside(png_name, "ttft")


def timeline_png_name(png_name: str) -> str:
    """File name of the timeline chart beside `png_name` (run.png -> run-timeline.png)."""
    return _beside(png_name, "timeline")


def _beside(png_name: str, what: str) -> str:
    stem, dot, ext = png_name.rpartition(".")
    return f"{stem}-{what}.{ext}" if dot else f"{png_name}-{what}"


_STAGE_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#c44e52", "#937860")


def write_breakdown_png(report: dict[str, Any], path: Path) -> None:
    """Stacked bars of the mean TTFT stages (paper Fig. 12 left): all turns, then the
    turns of each read path."""
    import matplotlib

    from dualpath.report.breakdown import STAGES

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = report["ttft_breakdown"]
    bars = [("all", b["n"], {k: b["stages"][k]["mean"] for k in STAGES})]
    bars += [(f"{p} read", v["n"], v["mean"]) for p, v in b["by_path"].items()]
    fig, ax = plt.subplots(figsize=(2.2 + 1.3 * len(bars), 4.2))
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for stage, colour in zip(STAGES, _STAGE_COLOURS, strict=True):
        h = np.array([m[stage] or 0.0 for _, _, m in bars])  # None: not measured
        if h.any():
            ax.bar(x, h, 0.6, bottom=bottom, label=stage.replace("_", " "), color=colour)
        bottom += h
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.2f} s", (x[i], total), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{name}\n({n} turns)" for name, n, _ in bars], fontsize=8)
    ax.set_ylabel("mean TTFT, emulated s")
    handles, labels = ax.get_legend_handles_labels()  # top of the stack first
    ax.legend(handles[::-1], labels[::-1], fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    sc = report["scenario"]
    ax.set_title(f"TTFT breakdown · {sc['name']} · {report['policy']['name']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_timeline_png(report: dict[str, Any], path: Path) -> None:
    """Prompt TPS and running agents (left axis) with TTFT (right axis) over emulated time,
    as the paper's Fig. 15 shows its 48P96D run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = report["timeline"]
    t = np.arange(tl["windows"]) * tl["window_s"]
    fig, (ax1, ax3) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax1.plot(t, np.asarray(tl["prompt_tps"]) / 1e6, color="#4c72b0", label="prompt TPS (×1e6)")
    ax1.set_xlabel("emulated time (s)")
    ax1.set_ylabel("prompt tokens per s (×1e6)")
    ax2 = ax1.twinx()
    ttft = np.array([np.nan if v is None else v for v in tl["ttft_mean_s"]], dtype=float)
    ax2.plot(t, ttft, color="#c44e52", linewidth=1, label="TTFT (s)")
    ax2.set_ylabel("mean TTFT of arrivals, s")
    ax1.set_title(f"prompt TPS and TTFT ({tl['window_s']:.0f} s windows)")
    lines = ax1.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax1.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="upper right")
    ax3.plot(t, tl["running_agents"], color="#55a868")
    ax3.set_xlabel("emulated time (s)")
    ax3.set_ylabel("running agents")
    ax3.set_title("running agents")
    sc = report["scenario"]
    fig.suptitle(f"{sc['name']} · policy {report['policy']['name']} · over time (emulated)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
