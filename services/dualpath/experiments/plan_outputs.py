"""What `dualpath plan` writes: the ranked table (plan.json, plan.md), the Pareto plot and the
winner's command line (docs/planner.md). Reads the probes' reports; runs nothing."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from dualpath.experiments.base import Plot, Results, Summary, Table
from dualpath.experiments.extract import fmt
from dualpath.experiments.plan import AT_BOUND, Plan, PlanSpec, measured, probes_of
from dualpath.experiments.plan_search import Measured, pareto, per_gpu, rank

SCHEMA = "dualpath.plan/v1"
PARETO_PNG = "pareto.png"
YLABEL = {"online": "capacity (APS meeting the SLO)", "offline": "agents / JCT (offline)"}
HEADER = ["rank", "policy", "P/D", "EP nodes", "tier GB/node", "GPUs", "capacity (APS)",
          "APS/GPU", "APS/node", "bound (APS)", "bound binds", "run binds", "offline JCT (s)",
          "probes"]  # fmt: skip


def sim_command(spec: PlanSpec, m: Measured) -> str:
    """The `dualpath sim` that reproduces the candidate's passing probe at its capacity."""
    argv = ["dualpath", "sim", "--preset", spec.preset]
    for s in spec.sets(m.candidate, m.aps if spec.objective == "online" else None):
        argv += ["--set", s]
    return shlex.join(argv)


def _row(plan: Plan, results: Results, i: int, m: Measured) -> dict[str, Any]:
    c, b = m.candidate, plan.bounds[m.candidate.key]
    return {
        "rank": i, "key": c.key, "policy": c.policy, "prefill_nodes": c.prefill,
        "decode_nodes": c.decode, "ep_nodes": c.ep_nodes, "dram_bytes_per_node": c.dram_bytes,
        "gpus": c.gpus, "nodes": c.nodes, "aps": m.aps, "aps_per_gpu": per_gpu(m.aps, c),
        "at_bound": m.aps is not None and m.aps >= b.aps * AT_BOUND * 0.999,
        "aps_per_node": None if m.aps is None else m.aps / c.nodes, "bound_aps": b.aps,
        "bound_binding": b.binding, "run_binding": m.binding or None, "offline_jct_s": m.jct_s,
        "probes": {f"{a:g}": ok for a, ok in sorted(probes_of(c, results).items())},
    }  # fmt: skip


def document(plan: Plan, results: Results) -> dict[str, Any]:
    """plan.json: the question, the counts, every candidate run (ranked), the front, the
    winner with its command, and why each other candidate did not run."""
    w = plan.walk(results)
    ranked = rank(measured(plan, results))
    rows = [_row(plan, results, i + 1, m) for i, m in enumerate(ranked)]
    winner = next((m for m in ranked if m.aps), None)
    s = plan.spec
    return {
        "schema": SCHEMA,
        "question": {
            "model": s.model,
            "gpu": s.gpu,
            "workload": s.workload,
            "preset": s.preset,
            "slo": {"ttft_s": s.slo.ttft_s, "tpot_s": s.slo.tpot_s},
            "gpus_max": s.gpus_max,
            "policies": list(s.policies),
            "ep_nodes": list(s.ep_nodes),
            "dram_bytes_per_node": list(s.dram_bytes),
            "duration_s": s.duration_s,
            "window_s": s.window_s,
            "lookback_s": s.lookback_s,
            "budget": s.budget,
            "width": s.width,
            "probes": s.probes,
            "offline_agents": s.offline_agents,
            "objective": s.objective,
        },
        "counts": {
            "candidates": len(plan.candidates),
            "run": len(w.ran),
            "pruned": len(w.pruned),
            "stopped": len(w.stopped),
            "over_budget": len(w.unrun),
            "probes": sum(len(probes_of(c, results)) for c in w.ran),
        },
        "ranked": rows,
        "pareto": [m.candidate.key for m in pareto(ranked)],
        "winner": None
        if winner is None
        else {
            "key": winner.candidate.key,
            "aps": winner.aps,
            "aps_per_gpu": per_gpu(winner.aps, winner.candidate),
            "command": sim_command(s, winner),
        },
        "pruned": w.pruned,
        "stopped": w.stopped,
        "over_budget": [c.key for c in w.unrun],
    }


def _cells(r: dict[str, Any]) -> list[str]:
    tier = r["dram_bytes_per_node"] / 1e9
    return [
        str(r["rank"]), r["policy"], f"{r['prefill_nodes']}P{r['decode_nodes']}D",
        str(r["ep_nodes"] or "all"), f"{tier:g}", str(r["gpus"]),
        fmt(r["aps"], 4) + (" (at bound)" if r["at_bound"] else ""),
        fmt(r["aps_per_gpu"], 5), fmt(r["aps_per_node"], 4), fmt(r["bound_aps"], 4),
        r["bound_binding"], r["run_binding"] or "—", fmt(r["offline_jct_s"], 1),
        " ".join(f"{a}{'✓' if ok else '✗'}" for a, ok in r["probes"].items()),
    ]  # fmt: skip


def markdown(doc: dict[str, Any], wall_s: float | None = None) -> str:
    q, n = doc["question"], doc["counts"]
    slo, offline = q["slo"], q["objective"] == "offline"
    asked = (
        f"Offline: {q['offline_agents']} agents per run, capacity = agents / JCT (no SLO)"
        if offline
        else f"SLO: TTFT ≤ {slo['ttft_s']:g} s, TPOT ≤ {slo['tpot_s']:g} s (last-window "
        f"means); probes of {q['duration_s']:g} s at most (window {q['window_s']:g} s)"
    )
    lines = [
        f"# Capacity plan: {q['model']} on {q['gpu']}, {q['workload']}, ≤ {q['gpus_max']} GPUs",
        "",
        f"{asked}; policies {', '.join(q['policies'])}. All times emulated.",
        "",
        f"Candidates: {n['candidates']}; run {n['run']} ({n['probes']} probes); pruned by "
        f"the bound {n['pruned']}; stopped by the bound {n['stopped']}; over the budget "
        f"{n['over_budget']}." + (f" Wall time {wall_s:.0f} s." if wall_s is not None else ""),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + " --- |" * len(HEADER),
        *("| " + " | ".join(_cells(r)) + " |" for r in doc["ranked"]),
        "",
        f"Pareto front (fewer GPUs, more APS): {', '.join(doc['pareto']) or '—'}.",
        "",
    ]
    if any(r["at_bound"] for r in doc["ranked"]):
        lines += ["A capacity *at bound* passed the SLO at its upper bound: no probe saturated "
                  "the cluster (too short; raise --duration), so it is the bound, not a "
                  "measurement, and ties with the other such candidates.", ""]  # fmt: skip
    win = doc["winner"]
    if win is None:
        lines.append("No candidate met the SLO at any probed rate.")
    else:
        lines += [
            f"**Winner: {win['key']}**, {win['aps']:g} APS ({win['aps_per_gpu']:.4g} "
            f"APS/GPU). Reproduce its {'run' if offline else 'passing probe'}:",
            "",
            "```",
            win["command"],
            "```",
        ]
    pruned = list(doc["pruned"].items())[:10]
    if pruned:
        lines += ["", "Pruned (first 10):", *(f"- {k}: {why}" for k, why in pruned)]
    return "\n".join(lines) + "\n"


def _draw(rows: list[Measured], front: list[Measured], ylabel: str) -> Any:
    def draw(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")  # headless, as experiments/charts.py
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for pol in sorted({m.candidate.policy for m in rows}):
            pts = [m for m in rows if m.candidate.policy == pol and m.aps]
            ax.scatter([m.candidate.gpus for m in pts], [m.aps or 0.0 for m in pts], label=pol)
        labels: dict[tuple[int, float], list[str]] = {}  # one label per point: 1P2D/2P1D
        for m in rows:
            if m.aps:
                labels.setdefault((m.candidate.gpus, m.aps), []).append(m.candidate.topo)
        for xy, names in labels.items():
            ax.annotate("/".join(sorted(set(names))), xy, fontsize=7)
        ax.plot([m.candidate.gpus for m in front], [m.aps or 0.0 for m in front], "k--", lw=1,
                label="Pareto front")  # fmt: skip
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.set_title("capacity plan: APS vs GPUs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    return draw


def summary(plan: Plan, results: Results) -> Summary:
    doc = document(plan, results)
    ranked = rank(measured(plan, results))
    n = doc["counts"]
    return Summary(
        tables=[
            Table(
                "Candidates run, ranked by APS per GPU", HEADER, [_cells(r) for r in doc["ranked"]]
            )
        ],
        plots=[
            Plot(
                PARETO_PNG,
                "capacity vs GPUs, Pareto front",
                _draw(ranked, pareto(ranked), YLABEL[plan.spec.objective]),
            )
        ],
        setup=[
            f"{n['candidates']} candidates, {n['run']} run, {n['pruned']} pruned, "
            f"{n['stopped']} stopped, {n['over_budget']} over budget"
        ],
    )
