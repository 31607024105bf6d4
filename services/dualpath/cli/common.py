"""What every `dualpath` command shares: the one-line error exit, the output-path check and
the scenario's name check, plus the flags several commands take.

The main app (cli/main.py), the commands registered on it (cli_*.py, cli/experiment.py) and
the progress line all import this module and never each other's privates, so the commands
form no import cycle (docs/architecture.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from dualpath.model.config.settings import Scenario

USAGE_ERROR = 2
SPEEDUP_HELP = "dilation: emulated seconds per wall second (higher = faster, until lag grows)"
# Beyond this an emulated millisecond is under 100 ns of wall time: the host cannot keep
# pace, lag is all the report would measure, and emulated clocks run off to 1e300.
MAX_SPEEDUP = 10_000.0


def fail(msg: str, code: int = USAGE_ERROR) -> None:
    """Print `error: MSG` as one line on stderr and exit with `code` (typer.Exit)."""
    # escape: messages quote user input, and "[/]" or "[red]" in it is not rich markup
    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(msg)}", highlight=False
    )
    raise typer.Exit(code)


def check_out_path(flag: str, path: Path, *, folder: bool = False) -> None:
    """Refuse an output path that cannot be written before any work starts (a report lost
    to a typo after a long run is the worst outcome). Creates the folder that will hold the
    output, as the command would anyway: only trying tells (root passes every access test)."""
    if not folder and path.is_dir():
        fail(f"{flag} {path}: is a folder; give a FILE.json")
    where = path if folder else path.parent
    if where.exists() and not where.is_dir():
        fail(f"{flag} {path}: {where} exists and is not a folder")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{flag} {path}: cannot create the folder {where} ({exc.strerror or exc})")
    if not os.access(where, os.W_OK | os.X_OK):
        fail(f"{flag} {path}: the folder {where} is not writable")


def validate(sc: Scenario, *, processes: bool = False) -> None:
    """Check every name a scenario refers to before anything runs. `processes`: for the
    process runtime (no check of its own today: the DRAM tier runs on it too; what runs on
    virtual time only, split reads, its scheduler refuses when it starts)."""
    from dualpath.model.policies.registry import default_registry
    from dualpath.model.roofline import load_gpu, load_model
    from dualpath.model.workload import parse_max_len
    from dualpath.runtimes.cluster import check_topology

    load_model(sc.model)
    load_gpu(sc.gpu)
    default_registry().get(sc.policy.name)
    parse_max_len(sc.workload.max_len)
    if sc.workload.source == "synthetic-pooled":
        from dualpath.model.workload.profiles import pooled_profile_for

        pooled_profile_for(parse_max_len(sc.workload.max_len))
    check_topology(sc)  # groups and HBM: before a process runtime starts anything
    w = sc.workload
    if w.source != "synthetic" and w.trace is not None and not Path(w.trace).exists():
        raise ValueError(f"workload.trace {w.trace}: no such file or folder")
