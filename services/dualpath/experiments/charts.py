"""Small matplotlib helpers (headless, Agg) for the experiments' PNGs.

Missing values (failed runs) are None and simply left out of a line or bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Series = dict[str, list[float | None]]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, title: str) -> None:
    plt = _pyplot()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _grid(n: int, width: float = 4.2, height: float = 3.2) -> tuple[Any, list[Any]]:
    cols = min(3, max(1, n))
    rows = math.ceil(max(1, n) / cols)
    fig, axes = _pyplot().subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat


@dataclass(slots=True)
class Panel:
    title: str
    x: list[float]
    series: Series
    span: tuple[float, float] | None = None  # shaded x range (e.g. a theory range)
    xticks: dict[float, str] = field(default_factory=dict)  # x -> tick label (default: auto)


def line_panels(
    path: Path,
    panels: Sequence[Panel],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    size: tuple[float, float] = (4.2, 3.2),
) -> None:
    fig, axes = _grid(len(panels), *size)
    for ax, p in zip(axes, panels, strict=False):
        for name, ys in p.series.items():
            pts = [(x, y) for x, y in zip(p.x, ys, strict=False) if y is not None]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=name)
        if p.span is not None and p.span[0] <= p.span[1]:
            ax.axvspan(p.span[0], p.span[1], color="tab:green", alpha=0.1, label="theory range")
        if logx:
            ax.set_xscale("log")
        if p.xticks:
            ax.set_xticks(list(p.xticks), list(p.xticks.values()), fontsize=7)
            ax.minorticks_off()
        ax.set_title(p.title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    _save(fig, path, title)


def grouped_bars(
    path: Path,
    groups: Sequence[str],
    series: Series,
    *,
    ylabel: str,
    title: str,
) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * max(1, len(series)) / 2), 4.2))
    width = 0.8 / max(1, len(series))
    for i, (name, ys) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        vals = [0.0 if y is None else y for y in ys]
        ax.bar(xs, vals, width=width, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    top = max((y for ys in series.values() for y in ys if y is not None), default=1.0)
    ax.set_ylim(0, top * 1.35)  # room for the legend above the bars
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path, title)


def time_series_panels(
    path: Path,
    panels: Sequence[tuple[str, dict[str, list[float]], float]],
    *,
    ylabel: str,
    title: str,
) -> None:
    """One panel per (title, {node: values}, window seconds)."""
    fig, axes = _grid(len(panels), width=5.5, height=3.4)
    for ax, (name, series, window_s) in zip(axes, panels, strict=False):
        for node, values in series.items():
            ax.plot([i * window_s for i in range(len(values))], values, label=node, linewidth=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("emulated time (s)")
        ax.set_ylabel(ylabel)
        if series:
            ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
    _save(fig, path, title)


@dataclass(slots=True)
class CategoryMap:
    """A heat map of categories: `cells[row][col]` = (category, text) or None (no result);
    rows are `y` (bottom to top), columns `x`."""

    title: str
    x: list[str]
    y: list[str]
    cells: list[list[tuple[str, str] | None]]


def category_maps(
    path: Path,
    panels: Sequence[CategoryMap],
    colors: dict[str, str],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
) -> None:
    """One panel per map; a cell's colour is its category's (`colors`), its text printed on
    it; a missing cell stays white. The legend lists every category in `colors`' order."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = list(colors)
    fig, axes = _grid(len(panels), width=1.0 + 1.0 * max(len(p.x) for p in panels), height=4.2)
    cmap = ListedColormap([colors[n] for n in names]).with_extremes(bad="white")
    for ax, p in zip(axes, panels, strict=False):
        codes = [[math.nan if c is None else names.index(c[0]) for c in row] for row in p.cells]
        ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, origin="lower",
                  aspect="auto", alpha=0.75)  # fmt: skip
        for r, row in enumerate(p.cells):
            for c, got in enumerate(row):
                ax.text(c, r, "no run" if got is None else got[1], ha="center", va="center",
                        fontsize=6.5)  # fmt: skip
        ax.set_xticks(range(len(p.x)), p.x, fontsize=8)
        ax.set_yticks(range(len(p.y)), p.y, fontsize=8)
        ax.set_title(p.title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    handles = [Patch(color=colors[n], alpha=0.75, label=n) for n in names]
    axes[len(panels) - 1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                                 fontsize=8)  # fmt: skip
    _save(fig, path, title)
