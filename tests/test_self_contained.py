"""The repository stands alone: no tracked file points outside it, and every citation of
docs/sources.md names an anchor that page defines.

The patterns are spelled so that this file does not match them itself (`[d]`, `[e]`, `\\.`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

# Notes that lived beside the checkout, never in it: the shared folder (relative or absolute),
# the design brief, the reference notes (constants, paper, conventions, emulation) and seeds.
OUTSIDE = re.compile(
    r"\.\./share[d]\b"
    r"|/work/share[d]\b"
    r"|\bshare[d]/(?:traces|reference|seeds)\b"
    r"|\bDESIG[N](?:\.md)?\s*§"
    r"|\bDESIG[N]\.md\b"
    r"|\b(?:constants|conventions|emulation|paper)\.md\b"
    r"|\breferenc[e]/"
    r"|\bseed[s]/\d{3}_"
)
# `../x` path tokens in docs and configs (links, kustomize resources, README commands run
# from the root): resolved from the file's own folder they must stay in the checkout. Python
# files are left out: there a relative path is relative to a working directory or to a file
# the code generates (compose's `../../..`), and OUTSIDE covers their citations.
RELATIVE = re.compile(r"(?<![\w./])((?:\.\./)+[\w.-]+)")
ANCHOR_CITE = re.compile(r"sources\.md#([a-z0-9-]+)")
SKIP_DIRS = {".git", ".venv", "out", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache"}


def _tracked() -> list[Path]:
    """Every file git tracks (a fresh clone's content); without git, the tree minus caches."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
        ).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [
            p.relative_to(REPO).as_posix()
            for p in REPO.rglob("*")
            if p.is_file() and not SKIP_DIRS & set(p.relative_to(REPO).parts)
        ]
    assert len(names) > 100, f"found only {len(names)} files under {REPO}"
    return [REPO / n for n in names if (REPO / n).is_file()]


def _lines(path: Path) -> list[str]:
    # Binary files (trace archives, images) are scanned too: a hit there is as real.
    return path.read_bytes().decode("utf-8", "replace").splitlines()


def _hits(pattern: re.Pattern[str]) -> list[tuple[Path, int, str]]:
    return [
        (path, n, line)
        for path in _tracked()
        for n, line in enumerate(_lines(path), 1)
        if pattern.search(line)
    ]


@pytest.mark.parametrize(
    "line",
    [
        "dualpath sim --trace ../sh" + "ared/traces/weka_claude_code",
        "derived from /work/sh" + "ared/traces/README.md",
        "(DESIGN" + " §2)",
        "Kernel figures are upper bounds (DESIGN" + ".md §5).",
        "constants" + ".md §1a (S1 h100_sxm.yaml)",
        "reference" + "/emulation" + ".md §4",
        "paper" + ".md §0 readings",
        "the closed forms of emulation" + ".md",
        "see seeds" + "/002_paper.txt",
    ],
)
def test_the_pattern_catches_outside_citations(line: str) -> None:
    assert OUTSIDE.search(line), line


@pytest.mark.parametrize(
    "line",
    [
        "docs/sources.md#gpu-peaks",
        "data/traces/weka_claude_code",
        "a prefix shared by two sessions",
        "resources: [../../base]",
        "DESIGNS and references",
    ],
)
def test_the_pattern_lets_in_repo_text_through(line: str) -> None:
    assert not OUTSIDE.search(line), line


def test_no_tracked_file_cites_notes_outside_the_repository() -> None:
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}" for p, n, line in _hits(OUTSIDE)]
    assert not found, "cites a file outside the repository (use docs/sources.md):\n" + "\n".join(
        found
    )


def test_relative_paths_stay_inside_the_repository() -> None:
    root = REPO.resolve()
    outside = []
    for path, n, line in _hits(RELATIVE):
        if path.suffix in (".py", ".pyi") or path.is_relative_to(REPO / "data"):
            continue
        for token in RELATIVE.findall(line):
            target = (path.parent / token).resolve()
            if target != root and root not in target.parents:
                outside.append(f"{path.relative_to(REPO)}:{n}: {token}")
    assert not outside, "relative path leaving the repository:\n" + "\n".join(outside)


def test_every_sources_anchor_cited_exists() -> None:
    page = (REPO / "docs" / "sources.md").read_text(encoding="utf-8")
    defined = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', page))
    assert {"paper-setup", "gpu-peaks", "references", "p", "s3"} <= defined
    cited = {(p, a) for p, _, line in _hits(ANCHOR_CITE) for a in ANCHOR_CITE.findall(line)}
    missing = sorted(f"{p.relative_to(REPO)}: #{a}" for p, a in cited if a not in defined)
    assert cited and not missing, "docs/sources.md has no such anchor:\n" + "\n".join(missing)


def test_every_source_tag_a_profile_cites_is_listed() -> None:
    """The S-tags in the profiles' `source:` texts resolve in docs/sources.md's references."""
    page = (REPO / "docs" / "sources.md").read_text(encoding="utf-8")
    profiles = REPO / "services" / "dualpath" / "profiles"
    tags = {t for f in profiles.rglob("*.yaml") for t in re.findall(r"\bS(\d+)\b", f.read_text())}
    assert tags, "no S-tag found in the profiles"
    missing = sorted(int(t) for t in tags if f'<a id="s{t}"></a>' not in page)
    assert not missing, f"S-tags cited by profiles but not in docs/sources.md: {missing}"
