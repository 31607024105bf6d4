"""The validation summary (issue 24 item 5): every ours-vs-paper row, its ratio, the median
and worst |error|, the share within ±10 %, per figure, and a plot.

Rows come from a CSV kept next to docs/results.md (`docs/validation.csv`: figure, what, ours,
paper, command, why) and from any experiment's `summary.json` (its `rows`, ours and paper
already paired with `paper_figures.yaml`). Error = ours / paper − 1. A row beyond ±10 % says
`why` in one cell: the measured stage or bound behind the gap (issue 24: "explained by a
measured stage or bound, not by a guess"); the summary lists those rows with it. Run

    python -m dualpath.experiments.validation docs/validation.csv [out/experiments] \\
        --png docs/img/validation.png

It prints the Markdown summary (docs/results.md embeds it).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

WITHIN = 0.10  # the target band: |ours / paper − 1| ≤ 10 %
_CLIP = 2.0  # the plot's right edge, ours / paper
_EPS = 1e-9  # 2.2 / 2.0 − 1 is 0.10000000000000009: the band's edge counts as inside
MISSING = "(no reason given: add a `why` cell)"


@dataclass(frozen=True, slots=True)
class Point:
    figure: str
    what: str
    ours: float
    paper: float
    why: str = ""  # beyond ±10 %: the measured stage or bound behind the gap

    @property
    def error(self) -> float:
        return self.ours / self.paper - 1

    @property
    def beyond(self) -> bool:
        return abs(self.error) > WITHIN + _EPS


def csv_points(path: Path) -> list[Point]:
    """Rows of a validation CSV (header: figure, what, ours, paper[, command][, why]); a bad
    cell raises ValueError naming the line and the fix."""
    out = []
    with path.open(encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.DictReader(fh), start=2):
            try:
                ours, paper = float(row["ours"]), float(row["paper"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"{path}:{n}: 'ours' and 'paper' must be numbers (columns: figure, what, "
                    "ours, paper, command)"
                ) from None
            if paper == 0:
                raise ValueError(f"{path}:{n}: 'paper' is 0; a ratio needs a nonzero paper value")
            why = (row.get("why") or "").strip()
            out.append(Point(row["figure"], row["what"], ours, paper, why))
    return out


def summary_points(folder: Path) -> list[Point]:
    """The paired rows of every `summary.json` under `folder` (rows missing a side skipped)."""
    out = []
    for js in sorted(folder.rglob("summary.json")):
        for r in json.loads(js.read_text(encoding="utf-8")).get("rows", []):
            if r.get("ours") is not None and r.get("paper"):
                out.append(Point(r["figure"], r["what"], float(r["ours"]), float(r["paper"])))
    return out


def stats(points: Sequence[Point]) -> dict[str, float]:
    errs = [abs(p.error) for p in points]
    return {
        "n": float(len(errs)),
        "median_abs_error": statistics.median(errs),
        "worst_abs_error": max(errs),
        "within_10pct": sum(not p.beyond for p in points) / len(errs),
    }


def by_figure(points: Iterable[Point]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in points:
        out.setdefault(p.figure, []).append(p)
    return out


def markdown(points: Sequence[Point]) -> str:
    if not points:
        raise ValueError("no rows: give a validation CSV or a folder of summary.json files")
    s = stats(points)
    lines = [
        f"{int(s['n'])} rows: median |error| {s['median_abs_error']:.1%}, worst "
        f"{s['worst_abs_error']:.1%}, within ±10 %: {s['within_10pct']:.0%}.",
        "",
        "| figure | rows | median abs error | worst abs error | within ±10 % |",
        "| --- | --- | --- | --- | --- |",
    ]
    for fig, pts in by_figure(points).items():
        f = stats(pts)
        lines.append(
            f"| {fig} | {len(pts)} | {f['median_abs_error']:.1%} | {f['worst_abs_error']:.1%} "
            f"| {f['within_10pct']:.0%} |"
        )
    lines += [
        "",
        "| figure | what | ours | paper | ours/paper |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {p.figure} | {p.what} | {p.ours:g} | {p.paper:g} | {p.ours / p.paper:.2f} |"
        for p in points
    ]
    return "\n".join(lines + _beyond(points)) + "\n"


def _beyond(points: Sequence[Point]) -> list[str]:
    """The rows beyond ±10 %, each with the measured reason its CSV row gives."""
    far = sorted((p for p in points if p.beyond), key=lambda p: -abs(p.error))
    if not far:
        return []
    lines = [
        "",
        f"Rows beyond ±10 % ({len(far)}), largest |error| first, with the measured stage or "
        "bound behind each gap:",
        "",
        "| figure | what | ours/paper | why |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {p.figure} | {p.what} | {p.ours / p.paper:.2f} | {p.why or MISSING} |" for p in far
    ]
    return lines


def plot(points: Sequence[Point], path: Path) -> None:
    """ours/paper per row, grouped by figure, with the ±10 % band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [p.ours / p.paper for p in points]
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.22 * len(points))))
    ys = list(range(len(points)))[::-1]
    ax.axvspan(1 - WITHIN, 1 + WITHIN, color="tab:green", alpha=0.15, label="±10 %")
    ax.axvline(1.0, color="k", lw=0.8)
    # One far outlier (Fig. 15's 9x) would squeeze every other row into the band: rows beyond
    # the axis sit at its edge as a triangle with their value written beside them.
    right = _CLIP
    inside = [(r, y) for r, y in zip(ratios, ys, strict=True) if r <= right]
    ax.scatter([r for r, _ in inside], [y for _, y in inside], s=14, zorder=3)
    for r, y in zip(ratios, ys, strict=True):
        if r > right:
            ax.scatter([right], [y], marker=">", s=24, color="tab:red", zorder=3)
            ax.annotate(f"{r:.2f}", (right, y), xytext=(-6, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=6, color="tab:red")  # fmt: skip
    ax.set_xlim(0, right + 0.05)
    ax.set_yticks(ys, [f"{p.figure}: {p.what}"[:60] for p in points], fontsize=6)
    s = stats(points)
    ax.set_xlabel("ours / paper")
    ax.set_title(
        f"{len(points)} rows: median |error| {s['median_abs_error']:.1%}, worst "
        f"{s['worst_abs_error']:.1%}, {s['within_10pct']:.0%} within ±10 %",
        fontsize=9,
    )
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dualpath.experiments.validation")
    ap.add_argument("sources", nargs="+", type=Path, help="validation CSVs or result folders")
    ap.add_argument("--png", type=Path, help="write the plot here")
    args = ap.parse_args(argv)
    points: list[Point] = []
    try:
        for src in args.sources:
            if src.is_dir():
                points += summary_points(src)
            elif src.is_file():
                points += csv_points(src)
            else:
                raise ValueError(f"{src}: no such file or folder")
        print(markdown(points), end="")
    except ValueError as exc:
        ap.exit(2, f"error: {exc}\n")
    if args.png is not None:
        plot(points, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
