"""`python -m dualpath.bench [PART ...]`: the one bench entry (`make bench` runs it).

Parts, in this order when none is named: `virtual` (the virtual-time runtime at paper scale,
compiled when `DUALPATH_NATIVE=1`), `process` (the process runtime's request rate and lag),
`locust` (Locust with one process against master + workers), `links` (the link fabric
alone). Each part is also `python -m dualpath.bench.PART` with its own flags (`--help`).
"""

from __future__ import annotations

import subprocess
import sys

PARTS = ("virtual", "process", "locust", "links")


def main(argv: list[str]) -> int:
    wanted = argv or list(PARTS)
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        print(
            f"python -m dualpath.bench: unknown part {', '.join(unknown)} "
            f"(choose from {', '.join(PARTS)})",
            file=sys.stderr,
        )
        return 2
    for part in wanted:
        print(f"== bench {part}", flush=True)
        # a process each: a part's loop, GC pacing and compiled modules never colour the next
        rc = subprocess.call([sys.executable, "-m", f"dualpath.bench.{part}"])
        if rc:
            print(f"python -m dualpath.bench: part {part} failed (exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
