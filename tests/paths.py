"""Paths of the repository's own files for the tests, found from this module's location.

The root is the nearest folder above this file that holds `pyproject.toml`, so a test
module works wherever it sits under tests/ (no `parents[N]` to recount after a move).
"""

from __future__ import annotations

from pathlib import Path


def repo_root(start: Path | None = None) -> Path:
    """The checkout's root: the nearest folder at or above `start` (default: this file) with
    a pyproject.toml."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    raise FileNotFoundError(f"no pyproject.toml above {here}: run the tests inside a checkout")


REPO = repo_root()
TRACES = REPO / "data" / "traces"  # the public traces the repository carries (docs/traces.md)
WEKA = TRACES / "weka_claude_code"
MOONCAKE = TRACES / "mooncake_synthetic" / "synthetic_trace.jsonl"
