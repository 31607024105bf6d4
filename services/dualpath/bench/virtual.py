"""`make bench`: speed of the virtual-time runtime, measured in one run (not a test).

Prints, each scenario in a process of its own (so its peak RSS is its own): the host's speed
on a fixed piece of Python (to spot a host that got slower), the link micro-benchmark, then
for the paper's 2P4D testbed (1024 agents, 64K) the CPU and wall time, turns per CPU second,
emulated seconds per CPU second and peak RSS; a 4x cluster with one EP group per side (8P16D,
`--scale` of its 4096 agents, default 0.25) and its per-turn cost over the 2P4D run; the scale
experiment's shape at 1, 4 and 24 units (2P4D units in unit-sized EP groups, 48K, 2048 agents
per unit times `--units-scale`, default 0.125: 256, 1024 and 6144 agents, the same load per
unit) and their per-turn cost over 1 unit; and, with `--against COMMIT`, the 2P4D run side
by side on that commit's own code and on this tree (`bench/pair.py`: CPU per completed turn,
old/new). `--profile` prints the functions where the time goes (the 2P4D run, in process).
Set `DUALPATH_NATIVE=1` to measure the compiled model (`python -m dualpath.native`).
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dualpath import native
from dualpath.model.config.presets import resolve
from dualpath.runtimes.virtual.sim import simulate

BASE = {"preset": "paper-ds660b-2p4d", "prefill": 2, "decode": 4, "agents": 1024}
LARGE = {"preset": "paper-ds660b-2p4d", "prefill": 8, "decode": 16, "agents": 4096}
DEFAULT_SCALE = 0.25
TARGET_RATIO = 1.1  # issue 26: per-turn cost 8P16D/4096 over 2P4D/1024, one EP group per side
# The scale experiment's shape (experiments/scale.py): N units of 2P4D with 2048 agents each
# at 48K, each side in EP groups of the unit's size. Per-decode-chunk and per-DE-choice work
# is O(GPUs of an EP group), so this separates cluster size from EP group size.
UNITS = (1, 4, 24)
UNIT_AGENTS = 2048
DEFAULT_UNITS_SCALE = 0.125  # 256 agents per unit: the 24-unit run (6144) stays in minutes
WORK_KEYS = (  # `work_per_turn`'s figures, compared by `ratio`
    "flows_per_turn",
    "reshares_per_turn",
    "link_recomputations_per_turn",
    "decode_chunks_per_turn",
)
UNIT_SETS = [
    "workload.max_len=48k",
    "topology.prefill_group_nodes=2",
    "topology.decode_group_nodes=4",
]


def measure(
    preset: str, prefill: int, decode: int, agents: int, sets: list[str], profile: bool = False
) -> tuple[dict[str, Any], str]:
    """Run one offline scenario in this process; its figures, and the profile text."""
    overrides = {
        "seed": 1,  # the measured runs; `--set seed=N` overrides
        "workload": {"agents": agents},
        "topology": {"prefill_nodes": prefill, "decode_nodes": decode},
    }
    sc = resolve(preset, overrides, sets)
    prof = cProfile.Profile() if profile else None
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    report = simulate(sc)
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    turns = report["requests"]["completed"]
    figures = {
        "scenario": f"{prefill}P{decode}D/{agents}",
        "preset": preset,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "turns": turns,
        "turns_per_wall_s": round(turns / wall),
        "turns_per_cpu_s": round(turns / cpu),
        "us_per_turn_cpu": round(1e6 * cpu / max(1, turns)),
        "emulated_s": round(report["jct_s"], 1),
        "emulated_s_per_wall_s": round(report["jct_s"] / wall, 1),
        "emulated_s_per_cpu_s": round(report["jct_s"] / cpu, 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,  # Linux: KiB
        "flows": report["runtime"]["flows"],
        **work_per_turn(report, turns),
        "compiled_model": native.active(),  # DUALPATH_NATIVE=1 with a build (dualpath/native/)
    }
    text = ""
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        text = buf.getvalue()
    return figures, text


def work_per_turn(report: dict[str, Any], turns: int) -> dict[str, float]:
    """The run's work a turn, counted (the same on any host, unlike its CPU time): flows,
    re-shares and link recomputations of the fabric, and decode chunks."""
    rt, n = report["runtime"], max(1, turns)
    return {
        "flows_per_turn": round(rt["flows"] / n, 2),
        "reshares_per_turn": round(rt["reshares"] / n, 2),
        "link_recomputations_per_turn": round(rt["link_recomputations"] / n, 2),
        "decode_chunks_per_turn": round(report["gpu"]["decode_chunks"] / n, 3),
    }


def host_reference(repeat: int = 5) -> dict[str, Any]:
    """Seconds this host takes for a fixed piece of pure-Python work (a heap of timers and a
    dict of running sums), best of `repeat`. If it moved between two bench runs, the host's
    CPU did. It fits in the cache, so it does not see a host whose memory got slower (the
    simulator's heap does): compare seconds only within one bench run."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        _reference_work()
        best = min(best, time.process_time() - t0)
    return {"reference_s": round(best, 4)}


def _reference_work() -> None:
    heap: list[tuple[float, int]] = []
    sums: dict[int, float] = {}
    for i in range(200_000):
        heapq.heappush(heap, ((i * 0.618034) % 1.0, i))
        key = i & 1023
        sums[key] = sums.get(key, 0.0) + 1.5
        if len(heap) > 64:
            heapq.heappop(heap)


def _in_child(spec: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Measure one scenario in a fresh interpreter: its peak RSS is its own, not the max of
    everything this process ran before."""
    cmd = [sys.executable, "-m", "dualpath.bench.virtual", "--child", json.dumps(spec)]
    for s in sets:
        cmd += ["--set", s]
    sys.stderr.write(f"  running {spec['prefill']}P{spec['decode']}D/{spec['agents']} ...\n")
    sys.stderr.flush()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


def ratio(
    base: dict[str, Any], large: dict[str, Any], target: float | None = TARGET_RATIO
) -> dict[str, Any]:
    """Per-turn cost of the large scenario over the base one (CPU time: steadier than wall on
    a shared host; the wall-time ratio is printed too), and the same ratio of the counted
    work a turn: a CPU ratio above the work ratios is the same work done slower (a live set
    that outgrows the caches), not more work (docs/native.md)."""
    per_turn_cpu = [f["cpu_s"] / max(1, f["turns"]) for f in (base, large)]
    per_turn_wall = [f["wall_s"] / max(1, f["turns"]) for f in (base, large)]
    work = {
        f"{key[: -len('_per_turn')]}_ratio": round(large[key] / base[key], 3) if base[key] else None
        for key in WORK_KEYS
    }
    return {
        "of": f"{large['scenario']} / {base['scenario']}",
        "per_turn_cost_ratio_cpu": round(per_turn_cpu[1] / per_turn_cpu[0], 3),
        "per_turn_cost_ratio_wall": round(per_turn_wall[1] / per_turn_wall[0], 3),
        "work_per_turn": work,
        "target": target,
    }


def units(fraction: float, sets: list[str], counts: tuple[int, ...] = UNITS) -> dict[str, Any]:
    """The scale experiment's shape at each unit count, and per-turn cost over the first."""
    out: dict[str, Any] = {"agents_per_unit": max(1, round(UNIT_AGENTS * fraction))}
    runs = []
    for n in counts:
        spec = {**BASE, "prefill": 2 * n, "decode": 4 * n, "agents": out["agents_per_unit"] * n}
        fig = _in_child(spec, [*UNIT_SETS, *sets])
        fig["scenario"] = f"{n} unit{'s' if n > 1 else ''}: {fig['scenario']} 48K, unit EP groups"
        print("sim: " + json.dumps(fig), flush=True)
        runs.append(fig)
    out["runs"] = runs
    out["ratios"] = [ratio(runs[0], r, None) for r in runs[1:]]
    for r in out["ratios"]:
        print("per-turn cost: " + json.dumps(r), flush=True)
    return out


def _scale_default() -> float:
    return float(os.environ.get("DUALPATH_BENCH_SCALE", DEFAULT_SCALE))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dualpath.bench.virtual", description=__doc__)
    ap.add_argument("--agents", type=int, default=BASE["agents"], help="agents of the 2P4D run")
    ap.add_argument(
        "--scale",
        type=float,
        default=_scale_default(),
        help="fraction of the 8P16D run's 4096 agents (env DUALPATH_BENCH_SCALE; 0 skips it)",
    )
    ap.add_argument(
        "--units-scale",
        type=float,
        default=DEFAULT_UNITS_SCALE,
        help="fraction of 2048 agents per unit in the 1/4/24-unit runs (0 skips them)",
    )
    ap.add_argument("--against", default="", help="also the 2P4D run side by side on this commit")
    ap.add_argument("--pair-runs", type=int, default=2, help="runs per tree in the pair (ABBA)")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--no-links", action="store_true", help="skip the link micro-benchmark")
    ap.add_argument("--profile", action="store_true", help="profile the 2P4D run (cProfile)")
    ap.add_argument("--json", dest="json_out", help="write the measured figures here")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # one scenario, figures as JSON
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        figures, _ = measure(**spec, sets=args.sets)
        print(json.dumps(figures))
        return 0

    results: dict[str, Any] = {"host": host_reference()}
    print(f"host: {json.dumps(results['host'])}")
    if not args.no_links:
        from dualpath.bench.links import bench_fabric

        t0 = time.perf_counter()
        results["links"] = bench_fabric()
        print(f"links: {json.dumps(results['links'])} ({time.perf_counter() - t0:.1f} s)")
    base_spec = {**BASE, "agents": args.agents}
    if args.profile:
        base, text = measure(**base_spec, sets=args.sets, profile=True)
        print(text)
    else:
        base = _in_child(base_spec, args.sets)
    results["base"] = base
    print("sim: " + json.dumps(results["base"]), flush=True)
    if args.scale > 0 and not args.profile:
        large_spec = {**LARGE, "agents": max(1, round(LARGE["agents"] * args.scale))}
        large = _in_child(large_spec, args.sets)
        results["large"] = large
        print("sim: " + json.dumps(large))
        results["ratio"] = ratio(base, large)
        note = "" if args.scale == 1 else f" (scale {args.scale}: not 4096 agents)"
        print("per-turn cost: " + json.dumps(results["ratio"]) + note, flush=True)
    if args.units_scale > 0 and not args.profile:
        results["units"] = units(args.units_scale, args.sets)
    if args.against and not args.profile:
        results["pair"] = _pair(args.against, args.agents, args.pair_runs, args.sets)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


def _pair(against: str, agents: int, runs: int, sets: list[str]) -> dict[str, Any]:
    from dualpath.bench.pair import run_pair

    with tempfile.TemporaryDirectory(prefix="dualpath-pair-") as tmp:
        res = run_pair(against, agents, runs, Path(tmp), sets)
    print("pair: " + json.dumps({k: v for k, v in res.items() if k != "runs"}), flush=True)
    return res


if __name__ == "__main__":
    raise SystemExit(main())
