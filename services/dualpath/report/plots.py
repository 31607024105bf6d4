"""PNG figures of a run: storage-NIC read throughput per node over time, and latency CDFs.

Computed from the cluster at the end of a run (the link series), written next to the JSON.
matplotlib runs headless (Agg); nothing here is needed to compute the report itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dualpath.runtime.cluster import Cluster

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


def write_png(report: dict[str, Any], path: Path) -> None:
    """Two panels: SNIC read GB/s per node over time, and TTFT/TPOT CDFs."""
    series: dict[str, list[float]] = report["snic"]["series_gbps"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, values in series.items():
        t = np.arange(len(values)) * report["snic"]["series_window_s"]
        ax1.plot(t, values, label=name, linewidth=1)
    ax1.set_xlabel("emulated time (s)")
    ax1.set_ylabel(f"SNIC read GB/s ({report['snic']['series_window_s']:.0f} s windows)")
    ax1.set_title(f"storage NICs — max/avg {report['snic']['balance_max_over_avg']:.2f}")
    ax1.legend(fontsize=7, ncol=2)
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
