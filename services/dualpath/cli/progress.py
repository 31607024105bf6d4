"""Progress of `dualpath sim` and `dualpath run`: a live bar on a terminal, a plain line
every few wall seconds without one (CI, a pipe, nohup), nothing with `--quiet`."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dualpath.cli.common import fail


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


def _progress_hook(progress: Progress | None) -> Any:
    if progress is None:
        return None
    task = progress.add_task("emulating", total=None)

    def hook(done: int, total: int, emulated_s: float | None = None) -> None:
        if done % 64 == 0 or done == total:
            progress.update(task, completed=done, total=total)

    return hook


PROGRESS_ENV = "DUALPATH_PROGRESS_S"
PROGRESS_EVERY_S = 10.0  # wall seconds between two progress lines without a terminal


def _progress_every_s() -> float:
    """The wall seconds between two plain progress lines ($DUALPATH_PROGRESS_S, else 10)."""
    raw = os.environ.get(PROGRESS_ENV, "").strip()
    if not raw:
        return PROGRESS_EVERY_S
    try:
        every = float(raw)
    except ValueError:
        every = math.nan
    if not (math.isfinite(every) and every > 0):
        fail(f"${PROGRESS_ENV} {raw!r}: must be a number of wall seconds > 0, e.g. 10")
    return every


class _ProgressLine:
    """Without a terminal (CI, a pipe, nohup) there is no live bar: one plain line on
    stderr every `every_s` wall seconds says how far the run is, instead of silence. A
    thread writes it, so the line comes even while no turn completes (a cluster starting).

    `dilation`: emulated seconds per wall second of a real-time run (the process runtime),
    else None: the virtual runtime then gives its emulated time with each hook call."""

    def __init__(self, what: str, unit: str, every_s: float, dilation: float | None = None) -> None:
        self.what, self.unit, self.every_s, self.dilation = what, unit, every_s, dilation
        self.done, self.total = 0, 0
        self.emulated_s: float | None = None
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-line", daemon=True)

    def hook(self, done: int, total: int, emulated_s: float | None = None) -> None:
        """(done, total) from the process runtime; the virtual runtime adds its emulated
        time (its core is no asyncio loop to read it from)."""
        self.done, self.total = done, total
        if self.dilation is None and emulated_s is not None:
            self.emulated_s = emulated_s

    def line(self) -> str:
        wall = time.monotonic() - self._t0
        if self.dilation is not None:
            emulated = f"emulated ≈ {wall * self.dilation:.0f} s, "
        elif self.emulated_s is not None:
            emulated = f"emulated {self.emulated_s:.1f} s, "
        else:  # work with no emulated clock (the planner's bounds): say nothing of it
            emulated = ""
        total = self.total or "?"
        rate = f"{self.done / wall:.1f} {self.unit}/s" if wall > 0 else "-"
        return f"{self.what}: {self.done}/{total} {self.unit}, {emulated}wall {wall:.0f} s, {rate}"

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            sys.stderr.write(self.line() + "\n")
            sys.stderr.flush()

    def __enter__(self) -> _ProgressLine:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


T = TypeVar("T")


class Hook(Protocol):
    """A progress hook: (done, total) from the process runtime; the virtual runtime adds
    the emulated time, so one hook serves both."""

    def __call__(self, done: int, total: int, emulated_s: float | None = None) -> None: ...


def with_progress(
    work: Callable[[Hook | None], T],
    quiet: bool,
    what: str,
    unit: str,
    dilation: float | None = None,
) -> T:
    """`work(hook)` with a live bar on a terminal, a plain stderr line every few seconds
    without one (`_ProgressLine`), nothing when `quiet`."""
    if quiet:
        return work(None)
    console = Console(stderr=True)
    if console.is_terminal:
        progress = _progress(console)
        with progress:
            return work(_progress_hook(progress))
    with _ProgressLine(what, unit, _progress_every_s(), dilation) as line:
        return work(line.hook)
