"""An experiment's outputs: summary.json, summary.md, the PNGs, and the terminal table."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table as RichTable

from dualpath.experiments.base import Experiment, Report, Row, RunSpec, Summary
from dualpath.experiments.extract import MISSING, key_figures

SCHEMA = "dualpath.experiment/v1"
TIME_NOTE = (
    "All times are emulated seconds on the virtual-time runtime (dilation n/a, lag 0: every "
    "event runs at its exact emulated time). Quick mode (`--quick`) uses reduced scenarios "
    "that are NOT comparable to the paper."
)


@dataclass(slots=True)
class RunRecord:
    spec: RunSpec
    report: Report
    status: str  # "ran", "failed", "cached" (own report) or "shared" (another experiment's)
    wall_s: float = 0.0

    @property
    def error(self) -> str | None:
        err = self.report.get("error")
        return None if err is None else str(err)


@dataclass(slots=True)
class Outcome:
    experiment: Experiment
    quick: bool
    jobs: int
    out_dir: Path
    records: dict[str, RunRecord] = field(default_factory=dict)
    summary: Summary = field(default_factory=Summary)
    problems: list[str] = field(default_factory=list)  # summarize / plot failures
    pngs: list[Path] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def results(self) -> dict[str, Report]:
        return {k: r.report for k, r in self.records.items()}

    @property
    def failed(self) -> list[str]:
        return [k for k, r in self.records.items() if r.status == "failed"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed or self.problems else 0


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def value(v: float | None) -> str:
    if v is None:
        return MISSING
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _ratio(r: Row) -> str:
    return MISSING if r.ratio is None else f"{r.ratio:.2f}"


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row_json(r: Row) -> dict[str, Any]:
    return {
        "figure": r.figure,
        "what": r.what,
        "ours": r.ours,
        "paper": r.paper,
        "ratio": r.ratio,
        "unit": r.unit,
        "note": r.note,
        "source": r.source,
    }


def summary_json(o: Outcome) -> dict[str, Any]:
    runs = []
    for key, rec in o.records.items():
        run: dict[str, Any] = {
            "key": key,
            "labels": rec.spec.labels,
            "status": rec.status,
            "figures": key_figures(rec.report),
        }
        if rec.error is not None:
            run["error"] = rec.error
        runs.append(run)
    s = o.summary
    return {
        "schema": SCHEMA,
        "experiment": o.experiment.name,
        "title": o.experiment.title,
        "quick": o.quick,
        "wall_s": round(o.wall_s, 3),
        "jobs": o.jobs,
        "runs": runs,
        "failed_runs": o.failed,
        "rows": [_row_json(r) for r in s.rows],
        "tables": [{"title": t.title, "header": t.header, "rows": t.rows} for t in s.tables],
        "plots": [{"file": p.filename, "caption": p.caption} for p in s.plots],
        "setup": s.setup,
        "notes": s.notes,
        "problems": o.problems,
        "exit_code": o.exit_code,
    }


def _table_md(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
    return out


def _row_cells(r: Row) -> list[str]:
    ours, paper = f"{value(r.ours)} {r.unit}".strip(), f"{value(r.paper)} {r.unit}".strip()
    return [r.figure, r.what, ours, paper, _ratio(r), r.note]


def summary_markdown(o: Outcome) -> str:
    s, exp = o.summary, o.experiment
    cached = sum(r.status in ("cached", "shared") for r in o.records.values())
    lines = [
        f"# {exp.title}",
        "",
        f"Experiment `{exp.name}` · {'quick' if o.quick else 'full'} mode · "
        f"{len(o.records)} runs ({cached} reused from cache, {len(o.failed)} failed) · "
        f"{o.wall_s:.1f} s wall · jobs {o.jobs}",
        "",
        f"> {TIME_NOTE}",
        "",
        "## Setup",
        "",
        *[f"- {line}" for line in s.setup],
        "",
        "## Ours vs paper",
        "",
        *_table_md(
            ["figure", "what", "ours", "paper", "ours/paper", "note"],
            [_row_cells(r) for r in s.rows],
        ),
    ]
    for t in s.tables:
        lines += ["", f"## {t.title}", "", *_table_md(t.header, t.rows)]
    if s.plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{_md(p.caption)}]({p.filename})\n" for p in s.plots]
    if s.notes or o.problems:
        lines += ["", "## Notes", "", *[f"- {n}" for n in s.notes + o.problems]]
    lines += ["", "## Runs", ""]
    lines += _table_md(
        ["key", "labels", "JCT (s)", "status"],
        [
            [
                k,
                ", ".join(f"{a}={b}" for a, b in r.spec.labels.items()),
                value(key_figures(r.report).get("jct_s")),
                r.status if r.error is None else f"failed: {r.error}",
            ]
            for k, r in o.records.items()
        ],
    )
    sources = {(r.figure, r.what): r.source for r in s.rows if r.source}
    if sources:
        lines += ["", "## Where the paper figures come from", ""]
        lines += [f"- {fig} — {what}: {src}" for (fig, what), src in sources.items()]
    return "\n".join(lines) + "\n"


def write_outputs(o: Outcome) -> list[Path]:
    """Write summary.json and summary.md (the PNGs are already written)."""
    js, md = o.out_dir / "summary.json", o.out_dir / "summary.md"
    atomic_write(md, summary_markdown(o))
    atomic_write(js, json.dumps(summary_json(o), indent=2))
    return [js, md, *o.pngs]


def rows_table(o: Outcome) -> RichTable:
    mode = "quick, NOT comparable to the paper" if o.quick else "emulated"
    table = RichTable(title=f"{o.experiment.title} ({mode})")
    for col in ("figure", "what", "ours", "paper", "ours/paper"):
        table.add_column(col, overflow="fold")
    for r in o.summary.rows:
        table.add_row(*_row_cells(r)[:5])
    return table
