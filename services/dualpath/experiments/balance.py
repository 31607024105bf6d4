"""Fig. 13/14 — load balance: storage-NIC traffic max/avg and attention-time max/avg."""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Report, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import fmt, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, run_key

NAME = "balance"
POLICIES = (("dualpath-simple", "round robin (Ours w/o scheduling)"), ("dualpath", "DualPath"))
# The paper does not say which side reads when both read queues are equal; ties are common
# when SNICs are far from saturated, so the experiment also runs the other choice.
TIE_PE = ("dualpath", "DualPath, read-path tie → PE side")
THREE_MACHINES = ("prefill0", "decode0", "decode1")  # the paper's Fig. 13 shows three
LOADED_FRACTION = 0.8
AGENTS, QUICK_AGENTS = 1024, 4
MAX_LEN = "48k"  # the paper's plot file is named read_lb_48k_1024traj (§7.5, a hint)


def _key(quick: bool, pol: str, tie: str = "") -> str:
    agents = QUICK_AGENTS if quick else AGENTS
    return run_key(
        "ds660b", ARM_660B.topo(quick), max_len(quick, MAX_LEN), f"a{agents}", pol, tie,
        quick=quick,
    )  # fmt: skip


def subset_balance(series: dict[str, list[float]], nodes: tuple[str, ...]) -> float | None:
    """Mean over the loaded windows of max/avg read throughput across `nodes`."""
    cols = [series[n] for n in nodes if n in series]
    if len(cols) < 2:
        return None
    n = int(min(len(c) for c in cols) * LOADED_FRACTION)
    ratios = []
    for i in range(n):
        vals = [c[i] for c in cols]
        avg = sum(vals) / len(vals)
        if avg > 0:
            ratios.append(max(vals) / avg)
    return sum(ratios) / len(ratios) if ratios else None


class Balance(Experiment):
    name = NAME
    title = "Fig. 13/14 — storage-NIC and attention load balance (DS 660B 2P4D, 48K)"

    def plan(self, quick: bool) -> list[RunSpec]:
        specs = []
        for pol, _ in POLICIES:
            sc = build(
                ARM_660B, quick, policy=pol, agents=QUICK_AGENTS if quick else AGENTS,
                max_len=MAX_LEN,
            )  # fmt: skip
            specs.append(RunSpec(_key(quick, pol), sc, labels(sc)))
        sc = build(
            ARM_660B, quick, policy=TIE_PE[0], agents=QUICK_AGENTS if quick else AGENTS,
            max_len=MAX_LEN, extra={"policy": {"path_tie": "pe"}},
        )  # fmt: skip
        specs.append(RunSpec(_key(quick, TIE_PE[0], "tie-pe"), sc, labels(sc, path_tie="pe")))
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        simple, full = (results.get(_key(quick, pol)) for pol, _ in POLICIES)
        tie_pe = results.get(_key(quick, TIE_PE[0], "tie-pe"))
        variants = (*POLICIES, TIE_PE)
        reports = (simple, full, tie_pe)
        window = "mean over 10 s windows of max/avg SNIC read bytes over all nodes, first 80 %"
        rows = [
            paper_row(NAME, "snic_round_robin", num(simple, "snic.balance_max_over_avg"),
                      f"policy dualpath-simple; {window}", quick=quick),
            paper_row(NAME, "snic_dualpath", num(full, "snic.balance_max_over_avg"),
                      f"policy dualpath; {window}", quick=quick),
            paper_row(NAME, "attention_dualpath", num(full, "gpu.attention_balance_max_over_avg"),
                      "per forward, over one EP group's GPUs, first 5 % of the run", quick=quick),
            paper_row(NAME, "snic_dualpath", num(tie_pe, "snic.balance_max_over_avg"),
                      f"policy dualpath, policy.path_tie=pe; {window}", quick=quick,
                      what="storage-NIC traffic max/avg, DualPath with read-path tie → PE"),
        ]  # fmt: skip
        header = ["variant", "SNIC max/avg (all nodes)", "SNIC max/avg (3 machines)",
                  "PE / DE node read util", "DE-side reads", "attention max/avg",
                  "JCT (s)"]  # fmt: skip
        table = [_row(label, rep) for (_, label), rep in zip(variants, reports, strict=True)]
        panels: list[tuple[str, dict[str, list[float]], float]] = []
        for (pol, label), rep in zip(variants, reports, strict=True):
            series = pick(rep, "snic.series_gbps")
            window_s = num(rep, "snic.series_window_s") or 10.0
            if isinstance(series, dict):
                balance = fmt(num(rep, "snic.balance_max_over_avg"), 3)
                panels.append((f"{label} ({pol}) — max/avg {balance}", series, window_s))

        def draw(path: Path) -> None:
            charts.time_series_panels(
                path, panels, ylabel="SNIC read GB/s", title="Fig. 13 — storage-NIC read traffic"
            )

        setup = [QUICK_SETUP] if quick else [f"DS 660B 2P4D offline, {MAX_LEN}, {AGENTS} agents"]
        setup += [
            "policies: dualpath-simple (dual path, round-robin scheduling) vs dualpath (full)",
            "the paper's Fig. 13 covers the storage NICs of three machines; ours covers all nodes",
        ]
        return Summary(
            rows=rows,
            tables=[Table("Load balance", header, table)],
            plots=[Plot("snic_series.png", "SNIC read GB/s per node over time", draw)],
            setup=setup,
        )


def _row(label: str, rep: Report | None) -> list[str]:
    per_node = pick(rep, "snic.per_node")
    utils: dict[str, list[float]] = {"prefill": [], "decode": []}
    if isinstance(per_node, dict):
        for node, st in per_node.items():
            side = "prefill" if node.startswith("prefill") else "decode"
            utils[side].append(float(st.get("read_util", 0.0)))
    means = [sum(v) / len(v) * 100 if v else None for v in utils.values()]
    series = pick(rep, "snic.series_gbps")
    three = subset_balance(series, THREE_MACHINES) if isinstance(series, dict) else None
    pe, de = num(rep, "read_path.pe"), num(rep, "read_path.de")
    share = None if pe is None or de is None or pe + de == 0 else de / (pe + de) * 100
    return [
        label,
        fmt(num(rep, "snic.balance_max_over_avg"), 3),
        fmt(three, 3),
        f"{fmt(means[0], 0)} % / {fmt(means[1], 0)} %",
        f"{fmt(share, 0)} %",
        fmt(num(rep, "gpu.attention_balance_max_over_avg"), 3),
        fmt(num(rep, "jct_s"), 0),
    ]
