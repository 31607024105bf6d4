"""tests/ mirrors the package and moves with it: a test module finds the checkout's files
through tests/paths.py, never by counting `parents[N]` up from itself (a test module that
moved one folder deeper silently skipped its trace cases that way)."""

from __future__ import annotations

import re

from tests.paths import REPO

COUNTED = re.compile(r"Path\(__file__\)(\.resolve\(\))?\.parents\[\d\]")


def test_no_test_module_counts_its_way_to_the_root() -> None:
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in sorted((REPO / "tests").rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if COUNTED.search(line) and p.name != "test_tests_layout.py"
    ]
    assert not found, "use tests.paths.REPO instead: " + ", ".join(found)


def test_the_pattern_catches_what_it_should() -> None:
    assert COUNTED.search("ROOT = Path(__file__).resolve().parents[2]")
    assert COUNTED.search("DOCS = Path(__file__).parents[2] / 'docs'")
    assert not COUNTED.search("services = Path(native.__file__).resolve().parents[2]")
