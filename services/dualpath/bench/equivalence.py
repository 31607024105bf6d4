"""`make equivalence`: the gate of issue 26 — the working tree against an older commit.

`python -m dualpath.bench.equivalence --against COMMIT [--seeds 5] [--only REGEX] [--jobs 2]`
runs the six reference scenarios over seeds 1..N on this working tree and on COMMIT's own code
(`bench/trees.py`: its CLI, in a cached detached worktree), then requires, per scenario, the
means of JCT, TTFT, TTST and TPOT within ±1 % of the old commit's and within the seeds' own
spread, and no block lost or corrupted on either tree (`bench/compare.py`). It prints the
table in markdown, writes it and every figure as JSON, and exits 1 when any row fails.

`--scale F` runs each offline scenario with that fraction of its agents and each online one
for that fraction of its emulated time limit (a quick look; the gate itself is `--scale 1`).
`--suite smoke` replaces the six with one tiny scenario (the tests use it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dualpath.bench import compare, trees

DS660B = ["--preset", "paper-ds660b-2p4d", "--max-len", "64k"]
DS27B = ["--preset", "paper-ds27b-1p1d"]
ONLINE_2P4D = ["--preset", "paper-ds660b-2p4d", "--max-len", "48k", "--aps", "0.4"]
UNIT_GROUPS = ["--set", "topology.prefill_group_nodes=2", "--set", "topology.decode_group_nodes=4"]
ONLINE_LIMIT_S = 3600.0  # experiments/scale.py's online rows: 48K, at most an emulated hour


@dataclass(frozen=True, slots=True)
class Scenario:
    """A `dualpath sim` command line; `agents` (offline) or `limit_s` (online) is what
    `--scale` shrinks."""

    key: str
    args: list[str]
    agents: int = 0
    limit_s: float = 0.0

    def argv(self, seed: int, scale: float, sets: list[str]) -> list[str]:
        out = [*self.args, "--seed", str(seed)]
        if self.agents:
            out += ["--agents", str(max(1, round(self.agents * scale)))]
        if self.limit_s:
            out += ["--set", f"online.max_duration_s={self.limit_s * scale:g}"]
        for s in sets:
            out += ["--set", s]
        return out


# The six: DS 660B 2P4D 64K 1024 agents Basic and DualPath; DS 27B 1P1D 512 agents
# Basic and DualPath; 8P16D with 2048 agents, DualPath (one EP group per side, as the preset
# has it); 2P4D at 0.4 APS online (the scale experiment's Table 3 row: 48K, unit-sized groups).
REFERENCE = (
    Scenario("ds660b-2p4d-a1024-basic", [*DS660B, "--policy", "basic"], agents=1024),
    Scenario("ds660b-2p4d-a1024-dualpath", [*DS660B, "--policy", "dualpath"], agents=1024),
    Scenario("ds27b-1p1d-a512-basic", [*DS27B, "--policy", "basic"], agents=512),
    Scenario("ds27b-1p1d-a512-dualpath", [*DS27B, "--policy", "dualpath"], agents=512),
    Scenario(
        "ds660b-8p16d-a2048-dualpath",
        [*DS660B, "--policy", "dualpath", "--prefill-nodes", "8", "--decode-nodes", "16"],
        agents=2048,
    ),
    Scenario(
        "ds660b-2p4d-online-aps0.4",
        [*ONLINE_2P4D, "--policy", "dualpath", *UNIT_GROUPS],
        limit_s=ONLINE_LIMIT_S,
    ),
)
SMOKE = (Scenario("smoke", ["--preset", "smoke"], agents=12),)
SUITES = {"reference": REFERENCE, "smoke": SMOKE}


@dataclass(slots=True)
class Plan:
    """What to run: scenarios x seeds on both trees, with the settings of each side."""

    scenarios: list[Scenario]
    seeds: list[int]
    scale: float
    old_sets: list[str] = field(default_factory=list)
    new_sets: list[str] = field(default_factory=list)

    def tasks(self) -> list[tuple[Scenario, int, str]]:
        """Old and new of each (scenario, seed) next to each other: host drift hits both."""
        return [(sc, seed, side) for sc in self.scenarios for seed in self.seeds
                for side in ("old", "new")]  # fmt: skip


def _run_all(
    plan: Plan, tree: dict[str, trees.Tree], out: Path, jobs: int, native: bool
) -> dict[tuple[str, int, str], trees.Run]:
    def one(task: tuple[Scenario, int, str]) -> tuple[tuple[str, int, str], trees.Run]:
        sc, seed, side = task
        sets = plan.old_sets if side == "old" else plan.new_sets
        path = out / side / sc.key / f"seed{seed}.json"
        run = trees.run_sim(tree[side], sc.argv(seed, plan.scale, sets), path, native)
        print(f"  {side} {sc.key} seed {seed}: {run.cpu_s:.1f} s CPU", file=sys.stderr, flush=True)
        return (sc.key, seed, side), run

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        return dict(pool.map(one, plan.tasks()))
    finally:  # a failed run: the queued ones never start (the running ones finish)
        pool.shutdown(wait=True, cancel_futures=True)


def evaluate(plan: Plan, runs: dict[tuple[str, int, str], trees.Run]) -> list[compare.Row]:
    rows: list[compare.Row] = []
    for sc in plan.scenarios:
        old = [runs[sc.key, s, "old"].report for s in plan.seeds]
        new = [runs[sc.key, s, "new"].report for s in plan.seeds]
        rows += compare.compare_reports(sc.key, old, new)
    return rows


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m dualpath.bench.equivalence",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--against", required=True, help="the older commit (sha, branch or tag)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 1..N on both trees (default 5)")
    ap.add_argument("--only", default="", help="only the scenarios whose key matches this regex")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of agents / time limit")
    ap.add_argument("--suite", choices=sorted(SUITES), default="reference")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="both trees: k=v")
    ap.add_argument("--native", action="store_true", help="both trees compiled (mypyc)")
    ap.add_argument("--out", default="out/equivalence", help="reports, table and JSON go here")
    ap.add_argument("--list", action="store_true", help="print the scenarios' commands and stop")
    # The new tree only: a default another change moved, set back to the old tree's value so
    # that both run the same settings; also the tests' negative control (it must fail).
    ap.add_argument(
        "--new-set",
        dest="new_sets",
        action="append",
        default=[],
        help="new tree only: k=v (a default changed since AGAINST, set back to its old value)",
    )
    return ap


def _plan(args: argparse.Namespace) -> Plan:
    try:
        pattern = re.compile(args.only)
    except re.error as exc:
        raise ValueError(f"--only {args.only!r} is not a regex ({exc})") from None
    chosen = [sc for sc in SUITES[args.suite] if pattern.search(sc.key)]
    if not chosen:
        keys = ", ".join(sc.key for sc in SUITES[args.suite])
        raise ValueError(f"--only {args.only!r} matches no scenario (choose from {keys})")
    if args.seeds < 1 or not 0 < args.scale <= 1:
        raise ValueError("--seeds must be >= 1 and --scale in (0, 1]")
    return Plan(chosen, list(range(1, args.seeds + 1)), args.scale, list(args.sets),
                [*args.sets, *args.new_sets])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        plan = _plan(args)
    except ValueError as exc:
        print(f"equivalence: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for sc in plan.scenarios:
            print(f"{sc.key}: dualpath sim {' '.join(sc.argv(plan.seeds[0], plan.scale, []))}")
        return 0
    try:
        tree = {"old": trees.checkout(args.against, "old"), "new": trees.working_tree("new")}
        if args.native:
            for t in tree.values():
                trees.build_native(t)
        out = Path(args.out)
        runs = _run_all(plan, tree, out, args.jobs, args.native)
    except trees.TreeError as exc:
        print(f"equivalence: {exc}", file=sys.stderr)
        return 2
    rows = evaluate(plan, runs)
    table = compare.markdown(rows)
    ok = compare.passed(rows)
    head = (
        f"old: {tree['old'].commit[:12]}, new: working tree; seeds {plan.seeds[0]}.."
        f"{plan.seeds[-1]}, scale {plan.scale:g}{', compiled' if args.native else ''}"
    )
    print(f"{head}\n\n{table}\n\nequivalence: {'PASS' if ok else 'FAIL'}")
    (out / "equivalence.md").write_text(f"{head}\n\n{table}\n")
    record: dict[str, Any] = {
        "against": tree["old"].commit,
        "seeds": plan.seeds,
        "scale": plan.scale,
        "native": args.native,
        "passed": ok,
        "rows": [r.as_dict() for r in rows],
        "cpu_s": {f"{k[2]}/{k[0]}/seed{k[1]}": round(r.cpu_s, 2) for k, r in runs.items()},
    }
    (out / "equivalence.json").write_text(json.dumps(record, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
