"""Side by side against an older commit: the same scenario on the old tree's own code and on
this working tree, interleaved old/new/new/old (ABBA) so that a host that drifts during the
run drifts for both, and their CPU per completed turn.

`python -m dualpath.bench.pair --against 0a402f5 [--agents 256] [--runs 2]` (also part of
`python -m dualpath.bench.virtual --against ...`, which `make bench` runs). The CPU counted is
the CPU inside `simulate` of each child (`bench/trees.py`); each child's whole CPU, with its
imports and report writing, is printed too. With `DUALPATH_NATIVE=1` both trees run compiled,
each building its own model first; if either build fails, both run in Python: compiled
against compiled or Python against Python, never mixed (each report says which it ran).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from dualpath.bench import trees

DEFAULT_AGAINST = "0a402f5"  # issue 26: every target is measured against this commit
# 2P4D, 64K, DualPath, the paper testbed (docs/native.md; the 2P4D/1024 target row)
SCENARIO = ["--preset", "paper-ds660b-2p4d", "--max-len", "64k", "--policy", "dualpath"]
# `--units N`: the scale experiment's shape instead (bench/virtual.py's UNIT_SETS): N units of
# 2P4D at 48K, each side in EP groups of the unit's size; 24 units is the paper's 48P96D.
UNIT_SCENARIO = [
    "--preset",
    "paper-ds660b-2p4d",
    "--max-len",
    "48k",
    "--policy",
    "dualpath",
    "--set",
    "topology.prefill_group_nodes=2",
    "--set",
    "topology.decode_group_nodes=4",
]


def scenario(agents: int, units: int) -> tuple[list[str], str]:
    """The child's `dualpath sim` arguments, and the scenario's name for the report."""
    if units < 1:
        return [*SCENARIO, "--agents", str(agents)], f"2P4D/{agents} 64K dualpath, seed 1"
    shape = ["--prefill-nodes", str(2 * units), "--decode-nodes", str(4 * units)]
    name = f"{units} units, {2 * units}P{4 * units}D/{agents} 48K unit EP groups dualpath, seed 1"
    return [*UNIT_SCENARIO, *shape, "--agents", str(agents)], name


def order(runs: int) -> list[str]:
    """old, new, new, old, old, new, ...: `runs` of each, every pair of rounds balanced."""
    out: list[str] = []
    for i in range(runs):
        out += ["old", "new"] if i % 2 == 0 else ["new", "old"]
    return out


def per_turn(runs: list[dict[str, Any]], key: str) -> float:
    """Mean CPU µs per completed turn of one tree's runs, by `key` (sim_cpu_s or cpu_s)."""
    return statistics.fmean(1e6 * r[key] / max(1, r["turns"]) for r in runs)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per tree its µs per turn; the ratio old/new (> 1: the new tree is cheaper)."""
    key = (
        "sim_cpu_s"
        if all(r["sim_cpu_s"] is not None for rs in runs.values() for r in rs)
        else "cpu_s"
    )
    us = {side: per_turn(rs, key) for side, rs in runs.items()}
    whole = {side: per_turn(rs, "cpu_s") for side, rs in runs.items()}
    return {
        "counted": "CPU inside simulate" if key == "sim_cpu_s" else "whole child CPU",
        "us_per_turn": {side: round(v, 1) for side, v in us.items()},
        "us_per_turn_whole_child": {side: round(v, 1) for side, v in whole.items()},
        "ratio_old_over_new": round(us["old"] / us["new"], 3),
    }


def _native(old: trees.Tree, new: trees.Tree) -> bool:
    """Compiled runs on both trees when both build; else Python on both."""
    if os.environ.get("DUALPATH_NATIVE", "0") != "1":
        return False
    try:
        for tree in (old, new):
            trees.build_native(tree)
    except trees.TreeError as exc:
        print(f"pair: {exc}: both trees run in Python", file=sys.stderr)
        return False
    return True


def run_pair(
    against: str, agents: int, runs: int, out: Path, sets: list[str], units: int = 0
) -> dict[str, Any]:
    """The pair's figures: every run's, and the summary."""
    tree = {"old": trees.checkout(against, "old"), "new": trees.working_tree("new")}
    native = _native(tree["old"], tree["new"])
    args, name = scenario(agents, units)
    args += ["--seed", "1"]
    for s in sets:
        args += ["--set", s]
    done: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for i, side in enumerate(order(runs)):
        run = trees.run_sim(tree[side], args, out / f"{i:02d}-{side}.json", native)
        fig = {
            "cpu_s": round(run.cpu_s, 2),
            "sim_cpu_s": None if run.sim_cpu_s is None else round(run.sim_cpu_s, 2),
            "turns": run.report["requests"]["completed"],
            "emulated_s": round(run.report["jct_s"], 1),
            "peak_rss_mb": round(run.peak_rss_mb),
        }
        print(f"pair: {side} {json.dumps(fig)}", flush=True)
        done[side].append(fig)
    return {
        "against": tree["old"].commit,
        "scenario": name,
        "compiled": native,
        "runs": done,
        **summarise(done),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dualpath.bench.pair", description=__doc__)
    ap.add_argument("--against", default=DEFAULT_AGAINST, help="the older commit")
    ap.add_argument("--agents", type=int, default=256, help="agents of the run")
    ap.add_argument(
        "--units",
        type=int,
        default=0,
        help="N units of 2P4D at 48K in unit EP groups (24: 48P96D); 0: one 2P4D at 64K",
    )
    ap.add_argument("--runs", type=int, default=2, help="runs per tree (interleaved ABBA)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="both trees: k=v")
    ap.add_argument("--json", dest="json_out", help="write the figures here")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.agents < 1 or args.units < 0:
        print("pair: --runs and --agents must be >= 1, --units >= 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dualpath-pair-") as tmp:
        try:
            res = run_pair(args.against, args.agents, args.runs, Path(tmp), args.sets, args.units)
        except trees.TreeError as exc:
            print(f"pair: {exc}", file=sys.stderr)
            return 2
    print("pair: " + json.dumps({k: v for k, v in res.items() if k != "runs"}))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
