"""data/traces/ is what its SHA256SUMS says: every file listed, every sum right, nothing extra."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.paths import TRACES

SUMS = TRACES / "SHA256SUMS"


def _listed() -> dict[str, str]:
    """path (relative to data/traces) -> hex digest, from `sha256sum` lines."""
    out: dict[str, str] = {}
    for n, line in enumerate(SUMS.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        assert sep and len(digest) == 64, f"SHA256SUMS line {n} is not `<sha256>  <path>`: {line!r}"
        assert name not in out, f"SHA256SUMS lists {name} twice"
        out[name] = digest
    return out


def _on_disk() -> set[str]:
    return {p.relative_to(TRACES).as_posix() for p in TRACES.rglob("*") if p.is_file()} - {
        SUMS.name
    }


def test_every_file_is_listed_and_every_listed_file_exists() -> None:
    listed, present = set(_listed()), _on_disk()
    assert not present - listed, f"not in data/traces/SHA256SUMS: {sorted(present - listed)[:5]}"
    assert not listed - present, f"listed but missing: {sorted(listed - present)[:5]}"
    assert len(listed) > 700  # 710 WEKA sessions plus the READMEs, licences and Mooncake file


def test_every_file_matches_its_sum() -> None:
    wrong = [
        name
        for name, digest in _listed().items()
        if hashlib.sha256((TRACES / name).read_bytes()).hexdigest() != digest
    ]
    assert not wrong, f"sha256 differs from data/traces/SHA256SUMS: {wrong[:5]}"


@pytest.mark.parametrize("folder", ["weka_claude_code", "mooncake_synthetic"])
def test_each_trace_keeps_its_licence_and_readme(folder: str) -> None:
    for name in ("LICENSE-APACHE-2.0.txt", "README.md"):
        path: Path = TRACES / folder / name
        assert path.is_file(), f"{path} missing: the data's licence and provenance travel with it"
    assert "Apache License" in (TRACES / folder / "LICENSE-APACHE-2.0.txt").read_text()
