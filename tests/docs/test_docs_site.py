"""The docs site builds with no warning: `mkdocs build --strict` with the validation of
mkdocs.yml, so a link to a missing page, an anchor no heading makes, or a page left out of
the nav fails here (what `make docs` and CI run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

ROOT = REPO


def test_docs_site_builds_strictly_without_a_warning(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean"]
    cmd += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    warnings = [ln for ln in out.splitlines() if "WARNING" in ln or "ERROR" in ln]
    assert not warnings, "\n".join(warnings)
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in tmp_path.glob("site/**/*.html")}
    # every docs page became a page of the site (use_directory_urls: false)
    for md in (ROOT / "docs").glob("*.md"):
        assert f"{md.stem}.html" in pages, f"{md.name}: no {md.stem}.html in the built site"
