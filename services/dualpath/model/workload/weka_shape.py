"""The WEKA trace's dispersion, as the small tables `synthetic-weka` draws from.

Derived once from the real Claude Code sessions in data/traces/weka_claude_code
(kv-cache-tester "v8 curated set", Apache-2.0; its README has the provenance) and shipped as
`weka_shape_data.py`, so the generator needs no trace at run time. Re-derive with

    python -m dualpath.model.workload.weka_shape data/traces/weka_claude_code \\
        > services/dualpath/model/workload/weka_shape_data.py

(about a minute and 1.2 GB: every session is read with the repo's own WEKA loader).

What is measured, per session (parent requests only, as the trace README's statistics;
`append` and `gen` exactly as trace replay defines them, docs/traces.md):

- its number of turns;
- its own scale: the mean append of its turns after the first, and the mean gen of its
  turns (sessions differ a lot: the sd of log mean append over sessions is 1.0);
- within a session, each turn's size over its session's mean (`append_rel`, `gen_rel`),
  pooled over the sessions of one scale quartile (SCALE_BINS, by rank of that mean: large
  sessions are more skewed inside than small ones) and kept as quantiles at QUANTILE_LEVELS.

The session tables keep the trace's own pairing of turn count, append scale and gen scale;
a session's turns are its scale times draws from its quartile's within-session quantiles.
With one pooled table instead, the p50/p99 of gens per turn came out 21 % off the trace's.
First prompts are not taken: a WEKA session's first request carries whatever an earlier
conversation left (mean 91K tokens, median 24K), not an agent task's prompt.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

# Quantile levels of the within-session tables: 1 % steps, finer in the tail (0.2 % from
# p90, 0.02 % from p99) so the p99 and beyond of a heavy-tailed size is kept.
QUANTILE_LEVELS: F64 = np.concatenate(
    [np.linspace(0, 0.9, 91), np.linspace(0.9, 0.99, 46)[1:], np.linspace(0.99, 1, 51)[1:]]
)
SCALE_BINS = 4  # within-session tables per quantity: one per quartile of session scale


def scale_bins(means: tuple[float, ...]) -> npt.NDArray[np.int64]:
    """Each session's scale quartile (0..SCALE_BINS-1) by rank of its mean (ties: order)."""
    n = len(means)
    bins = np.empty(n, dtype=np.int64)
    bins[np.argsort(means, kind="stable")] = np.arange(n) * SCALE_BINS // n
    return bins


@dataclass(frozen=True, slots=True)
class WekaShape:
    """Per-session scales and pooled within-session quantiles (see the module doc)."""

    turns: tuple[int, ...]  # per session
    append_mean: tuple[float, ...]  # per session: mean append of turns 2..
    gen_mean: tuple[float, ...]  # per session: mean gen of all turns
    append_rel: tuple[tuple[float, ...], ...]  # per scale bin: quantiles of append / mean
    gen_rel: tuple[tuple[float, ...], ...]  # per scale bin: quantiles of gen / gen_mean
    source: str

    def __post_init__(self) -> None:
        n = len(self.turns)
        if n == 0 or not len(self.append_mean) == len(self.gen_mean) == n:
            raise ValueError("WekaShape: one turns/append_mean/gen_mean entry per session")
        tables = (*self.append_rel, *self.gen_rel)
        if len(tables) != 2 * SCALE_BINS or {len(t) for t in tables} != {len(QUANTILE_LEVELS)}:
            raise ValueError(
                f"WekaShape: {SCALE_BINS} quantile tables of {len(QUANTILE_LEVELS)} values each"
            )
        if min(self.turns) < 2 or min(self.append_mean) <= 0 or min(self.gen_mean) <= 0:
            raise ValueError("WekaShape: sessions need >= 2 turns and positive mean sizes")


def derive(path: Path) -> WekaShape:
    """Measure the tables from a WEKA trace folder (parent requests of every session)."""
    from dualpath.model.workload.traces import load_trace

    workload = load_trace(path, "weka", subagents=False)
    turns, a_rel, g_rel = [], [], []
    for s in workload.scripts:
        if len(s.turns) < 2:  # no append after a first turn to measure (none in the v8 set)
            continue
        turns.append(len(s.turns))
        a_rel.append(np.array([t.append for t in s.turns[1:]], dtype=float))
        g_rel.append(np.array([t.gen for t in s.turns], dtype=float))
    a_mean = tuple(round(float(a.mean()), 1) for a in a_rel)
    g_mean = tuple(round(float(g.mean()), 1) for g in g_rel)
    return WekaShape(
        tuple(turns),
        a_mean,
        g_mean,
        _binned_quantiles(a_rel, a_mean),
        _binned_quantiles(g_rel, g_mean),
        f"{path.name}: {len(turns)} sessions, {workload.requests} parent requests",
    )


def _binned_quantiles(sizes: list[F64], means: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Per scale bin, quantiles of every turn's size over its session's (shipped) mean."""
    bins = scale_bins(means)
    out = []
    for b in range(SCALE_BINS):
        rel = np.concatenate([x / m for x, m, k in zip(sizes, means, bins, strict=True) if k == b])
        out.append(tuple(float(f"{q:.5g}") for q in np.quantile(rel, QUANTILE_LEVELS)))
    return tuple(out)


def render(shape: WekaShape) -> str:
    """`weka_shape_data.py`: the tables as Python literals (packaged with the code)."""
    out = [
        '"""Generated by `python -m dualpath.model.workload.weka_shape TRACE_DIR`; do not edit.',
        "",
        "Source: WEKA kv-cache-tester Claude Code traces (github.com/callanjfox/kv-cache-tester,",
        "v8 curated set, Apache-2.0; data/traces/weka_claude_code/README.md):",
        f"{shape.source}. See weka_shape.py.",
        '"""',
        "",
        "from dualpath.model.workload.weka_shape import WekaShape",
        "",
        "# fmt: off",
        "WEKA_SHAPE = WekaShape(",
    ]
    for name in ("turns", "append_mean", "gen_mean"):
        out.append(f"    {name}=(")
        out += _wrapped([_num(v) for v in getattr(shape, name)])
        out.append("    ),")
    for name in ("append_rel", "gen_rel"):
        out.append(f"    {name}=(")
        for table in getattr(shape, name):
            out.append("        (")
            out += _wrapped([_num(v) for v in table], indent=11)
            out.append("        ),")
        out.append("    ),")
    out += [f"    source={json.dumps(shape.source)},", ")", "# fmt: on", ""]
    return "\n".join(out)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def _wrapped(items: list[str], width: int = 99, indent: int = 7) -> list[str]:
    lines, line = [], " " * indent
    for item in items:
        if len(line) + len(item) + 2 > width:
            lines.append(line)
            line = " " * indent
        line += f" {item},"
    return [*lines, line]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dualpath.model.workload.weka_shape TRACE_DIR > weka_shape_data.py")
        return 2
    sys.stdout.write(render(derive(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
