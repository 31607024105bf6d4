"""`make equivalence` for real on a tiny scenario: HEAD, checked out and run on its own CLI in a
child process, against this working tree. The same settings must pass; a setting changed on
the new tree only (`--new-set`) must fail the gate."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dualpath.bench import trees
from dualpath.bench.equivalence import main
from tests.paths import REPO

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout"
)


@pytest.fixture
def trees_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache of old trees of this test's own; its worktrees are unregistered afterwards."""
    folder = tmp_path / "trees"
    monkeypatch.setenv("DUALPATH_TREES_DIR", str(folder))
    yield folder
    for tree in folder.glob("*"):
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def test_head_against_itself_passes_and_a_one_sided_change_fails(
    trees_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --out, as `make equivalence` passes it
    out = tmp_path / "same"
    sha = trees.resolve_commit("HEAD")
    argv = ["--against", sha, "--suite", "smoke", "--jobs", "2", "--out", "same"]
    assert main([*argv, "--seeds", "2"]) == 0
    printed = capsys.readouterr().out
    assert "| smoke | jct_s | 2 |" in printed and "equivalence: PASS" in printed
    record = json.loads((out / "equivalence.json").read_text())
    assert record["passed"] and len(record["rows"]) == 5
    assert all(r["diff_pct"] == 0.0 for r in record["rows"])
    # the old side really ran the checked-out commit, not this tree
    assert record["against"] == sha and (trees_dir / sha / "services" / "dualpath").is_dir()
    assert len(record["cpu_s"]) == 4 and all(v > 0 for v in record["cpu_s"].values())

    bad = tmp_path / "changed"
    changed = [*argv, "--seeds", "1", "--out", str(bad), "--new-set", "hardware.snic_gbps=50"]
    assert main(changed) == 1
    printed = capsys.readouterr().out
    assert "equivalence: FAIL" in printed and "**FAIL**" in printed
    assert not json.loads((bad / "equivalence.json").read_text())["passed"]


def test_the_child_must_import_the_tree_it_was_given(tmp_path: Path) -> None:
    """A tree whose `services/` holds no package: the child imports another one, refused."""
    (tmp_path / "services" / "dualpath").mkdir(parents=True)
    fake = trees.Tree("old", tmp_path / "services", "none")
    with pytest.raises(trees.TreeError, match="imported"):
        trees.run_sim(fake, ["--preset", "smoke"], tmp_path / "out" / "r.json")


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--against", "HEAD", "--only", "nothing-matches"]) == 2
    assert "matches no scenario" in capsys.readouterr().err
    assert main(["--against", "no-such-commit-xyz", "--suite", "smoke"]) == 2
    assert "no such commit" in capsys.readouterr().err
