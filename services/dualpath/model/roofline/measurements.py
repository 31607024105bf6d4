"""Step-time measurements for `dualpath calibrate`: the CSV format and its validation.

Pure: it parses text (the command reads the file). One row is one measured forward or decode
step of a homogeneous batch, the shape the roofline prices (docs/roofline.md, Calibrate):

- `phase`: `prefill` (one forward over all layers) or `decode` (one step, one token each);
- `batch`: requests in the forward / step, a whole number >= 1;
- `context_tokens`: prefill: tokens per request whose KV is already there (cache hit),
  >= 0; decode: each request's context length, >= 1;
- `new_tokens`: prefill: tokens computed per request, >= 1; decode: 1 or empty;
- `step_ms`: the measured time of that forward / step, milliseconds, > 0;
- `ep_gpus` (optional): the expert-parallel group size of the run, else `--ep`.

Lines that are blank or start with `#` are skipped. Every error names the line, the
column and the fix, in one line (the CLI prints it and exits 2).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Phase = Literal["prefill", "decode"]
REQUIRED = ("phase", "batch", "context_tokens", "new_tokens", "step_ms")
OPTIONAL = ("ep_gpus",)
PHASES: tuple[Phase, ...] = ("prefill", "decode")
HEADER_HELP = ",".join(REQUIRED) + " (optional: " + ",".join(OPTIONAL) + ")"


class MeasurementError(ValueError):
    """A measurement file is unusable; the message names the line, the column and the fix."""


@dataclass(frozen=True, slots=True)
class Measurement:
    line: int  # line of the file, for residual reports and errors
    phase: Phase
    batch: int
    context_tokens: int
    new_tokens: int  # always 1 for decode
    step_s: float
    ep_gpus: int  # expert-parallel GPUs of the measured run (the row's, else --ep)


def _rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of every non-blank, non-comment CSV record."""
    reader = csv.reader(io.StringIO(text))
    for cells in reader:
        if not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        yield reader.line_num, [c.strip() for c in cells]


def _header(label: str, line: int, cells: list[str]) -> dict[str, int]:
    where = f"{label} line {line} (header)"
    names = [c.lower() for c in cells]
    for name in names:
        if names.count(name) > 1:
            raise MeasurementError(f"{where}: column {name!r} appears twice; keep one")
        if name not in REQUIRED and name not in OPTIONAL:
            raise MeasurementError(
                f"{where}: unknown column {name!r}; accepted: {', '.join(REQUIRED + OPTIONAL)}"
            )
    for name in REQUIRED:
        if name not in names:
            raise MeasurementError(
                f"{where}: missing column {name!r}; the header must be {HEADER_HELP}"
            )
    return {name: i for i, name in enumerate(names)}


class _Row:
    """Typed access to one record's cells; errors name the line, row and column."""

    def __init__(self, label: str, line: int, row: int, cells: list[str], cols: dict[str, int]):
        self.where = f"{label} line {line} (row {row})"
        self.cells, self.cols = cells, cols

    def fail(self, column: str, problem: str) -> MeasurementError:
        return MeasurementError(f"{self.where}, column {column!r}: {problem}")

    def text(self, column: str) -> str:
        i = self.cols.get(column)
        return self.cells[i] if i is not None else ""

    def number(self, column: str) -> float:
        raw = self.text(column)
        if not raw:
            raise self.fail(column, "empty; every row needs a value")
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(
                column, f"{raw!r} is not a number; write a plain number, e.g. 12.5"
            ) from None
        if not math.isfinite(value):
            raise self.fail(column, f"{raw!r} is not a finite number")
        return value

    def integer(self, column: str, minimum: int) -> int:
        value = self.number(column)
        if value != int(value) or value < minimum:
            raise self.fail(column, f"{self.text(column)!r} must be a whole number >= {minimum}")
        return int(value)


def _measurement(r: _Row, line: int, default_ep: int | None) -> Measurement:
    raw_phase = r.text("phase").lower()
    if raw_phase not in PHASES:
        raise r.fail("phase", f"{r.text('phase')!r} is not a phase; use prefill or decode")
    phase: Phase = "decode" if raw_phase == "decode" else "prefill"
    batch = r.integer("batch", 1)
    context = r.integer("context_tokens", 1 if phase == "decode" else 0)
    if phase == "decode":
        # A decode step produces one token per request (no speculative decoding here).
        new = 1 if not r.text("new_tokens") else r.integer("new_tokens", 1)
        if new != 1:
            raise r.fail("new_tokens", f"{new} in a decode row; a decode step makes 1 token")
    else:
        new = r.integer("new_tokens", 1)
    step_ms = r.number("step_ms")
    if step_ms <= 0:
        raise r.fail("step_ms", f"{r.text('step_ms')} must be > 0 (measured milliseconds)")
    if r.text("ep_gpus"):
        ep = r.integer("ep_gpus", 1)
    elif default_ep is None:
        # The EP size changes the kernel time (experts per GPU): never guess it.
        raise r.fail("ep_gpus", "no value and no --ep; give the EP group size the step ran on")
    else:
        ep = default_ep
    return Measurement(line, phase, batch, context, new, step_ms / 1e3, ep)


def parse_measurements(
    text: str, label: str = "measurements", default_ep: int | None = None
) -> list[Measurement]:
    """Every row of a measurement CSV, validated; `label` (the file name) prefixes errors,
    `default_ep` is the EP group size of rows without `ep_gpus` (the CLI's --ep)."""
    rows = _rows(text)
    first = next(rows, None)
    if first is None:
        raise MeasurementError(f"{label}: empty; the first line must be the header {HEADER_HELP}")
    cols = _header(label, *first)
    out: list[Measurement] = []
    for line, cells in rows:
        if len(cells) != len(cols):
            raise MeasurementError(
                f"{label} line {line} (row {len(out) + 1}): {len(cells)} cells, the header has "
                f"{len(cols)}; one value per column"
            )
        row = _Row(label, line, len(out) + 1, cells, cols)
        out.append(_measurement(row, line, default_ep))
    if not out:
        raise MeasurementError(f"{label}: a header but no measurement rows; add at least two")
    return out


__all__ = [
    "HEADER_HELP",
    "OPTIONAL",
    "PHASES",
    "REQUIRED",
    "Measurement",
    "MeasurementError",
    "parse_measurements",
]
