"""`dualpath roofline`, `policies`, `presets`: what the testbed knows, listed."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console


def roofline(
    json_: Annotated[bool, typer.Option("--json", help="print JSON rows")] = False,
) -> None:
    """Print the cache-compute ratio table (paper Table 1, append 429)."""
    from dualpath.model.roofline import render_table, roofline_table

    rows = roofline_table()
    if json_:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        Console().print(render_table(rows))


def policies() -> None:
    """List the scheduling policies by name."""
    from dualpath.model.policies.registry import default_registry

    for name, desc in default_registry().describe().items():
        typer.echo(f"{name:14s} {desc}")


def presets() -> None:
    """List the packaged scenario presets."""
    from dualpath.model.config.presets import preset_names

    for name in preset_names():
        typer.echo(name)


def register(app: typer.Typer) -> None:
    app.command()(roofline)
    app.command()(policies)
    app.command()(presets)
