"""Fig. 13/14 — load balance: storage-NIC traffic max/avg and attention-time max/avg."""

from __future__ import annotations

from pathlib import Path

from dualpath.experiments import charts
from dualpath.experiments.base import Experiment, Plot, Results, RunSpec, Summary, Table
from dualpath.experiments.extract import fmt, num, pick
from dualpath.experiments.figures import paper_row
from dualpath.experiments.scenarios import ARM_660B, QUICK_SETUP, build, labels, max_len, run_key

NAME = "balance"
POLICIES = (("dualpath-simple", "round robin (Ours w/o scheduling)"), ("dualpath", "DualPath"))
AGENTS, QUICK_AGENTS = 1024, 4
MAX_LEN = "48k"  # the paper's plot file is named read_lb_48k_1024traj (§7.5, a hint)


def _key(quick: bool, pol: str) -> str:
    agents = QUICK_AGENTS if quick else AGENTS
    return run_key(
        "ds660b", ARM_660B.topo(quick), max_len(quick, MAX_LEN), f"a{agents}", pol, quick=quick
    )


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
        return specs

    def summarize(self, quick: bool, results: Results) -> Summary:
        simple, full = (results.get(_key(quick, pol)) for pol, _ in POLICIES)
        window = "mean over 10 s windows of max/avg SNIC read bytes over all nodes, first 80 %"
        rows = [
            paper_row(NAME, "snic_round_robin", num(simple, "snic.balance_max_over_avg"),
                      f"policy dualpath-simple; {window}", quick=quick),
            paper_row(NAME, "snic_dualpath", num(full, "snic.balance_max_over_avg"),
                      f"policy dualpath; {window}", quick=quick),
            paper_row(NAME, "attention_dualpath", num(full, "gpu.attention_balance_max_over_avg"),
                      "per forward, over one EP group's GPUs, first 5 % of the run", quick=quick),
        ]  # fmt: skip
        header = ["policy", "SNIC max/avg", "attention max/avg (first 5 %)", "JCT (s)"]
        table = [
            [
                label,
                fmt(num(rep, "snic.balance_max_over_avg"), 3),
                fmt(num(rep, "gpu.attention_balance_max_over_avg"), 3),
                fmt(num(rep, "jct_s"), 0),
            ]
            for (_, label), rep in zip(POLICIES, (simple, full), strict=True)
        ]
        panels: list[tuple[str, dict[str, list[float]], float]] = []
        for (pol, label), rep in zip(POLICIES, (simple, full), strict=True):
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
