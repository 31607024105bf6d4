"""`make bench`: speed of the virtual-time runtime, measured in one run (not a test).

Prints wall time and emulated seconds per wall second for the paper-scale scenario
(`paper-ds660b-2p4d`, 1024 agents, 64K), the link micro-benchmark, and with
`--profile` the functions where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from typing import Any

from dualpath.config.presets import resolve
from dualpath.runtime.sim import simulate


def _run(preset: str, agents: int, sets: list[str], profile: bool) -> tuple[dict[str, Any], str]:
    sc = resolve(preset, {"workload": {"agents": agents}}, sets)
    prof = cProfile.Profile() if profile else None
    done = [0]

    def progress(n: int, total: int) -> None:
        if n * 20 // total != done[0]:
            done[0] = n * 20 // total
            sys.stderr.write(f"\r  {preset}: {n}/{total} turns")
            sys.stderr.flush()

    if prof:
        prof.enable()
    report = simulate(sc, progress)
    if prof:
        prof.disable()
    sys.stderr.write("\n")
    text = ""
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        text = buf.getvalue()
    return report, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dualpath.bench", description=__doc__)
    ap.add_argument("--preset", default="paper-ds660b-2p4d")
    ap.add_argument("--agents", type=int, default=1024)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--profile", action="store_true", help="print the top functions (cProfile)")
    ap.add_argument("--json", dest="json_out", help="write the measured figures here")
    args = ap.parse_args(argv)

    from dualpath.links.bench import bench_fabric

    t0 = time.perf_counter()
    fabric = bench_fabric()
    print(f"links: {json.dumps(fabric)} ({time.perf_counter() - t0:.1f} s)")
    report, prof = _run(args.preset, args.agents, args.sets, args.profile)
    rt = report["runtime"]
    figures = {
        "scenario": args.preset,
        "agents": args.agents,
        "wall_s": round(rt["wall_s"], 1),
        "jct_emulated_s": round(report["jct_s"], 1),
        "emulated_s_per_wall_s": round(rt["emulated_per_wall"], 1),
        "requests": report["requests"]["completed"],
        "flows": rt["flows"],
        "forwards": report["gpu"]["forwards"],
        "decode_chunks": report["gpu"]["decode_chunks"],
        "target_wall_s": 300,
    }
    print("sim: " + json.dumps(figures))
    if prof:
        print(prof)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"links": fabric, "sim": figures}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
