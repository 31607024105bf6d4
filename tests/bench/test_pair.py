"""The side-by-side pair (bench/pair.py): its order and arithmetic, and one real pair of HEAD's
own CLI against this working tree on a tiny 2P4D run."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dualpath.bench.pair import main, order, scenario, summarise
from tests.paths import REPO


def test_order_interleaves_old_and_new_abba() -> None:
    assert order(1) == ["old", "new"]
    assert order(2) == ["old", "new", "new", "old"]
    assert order(3).count("old") == order(3).count("new") == 3


def test_units_give_the_scale_experiments_shape_and_zero_the_2p4d_run() -> None:
    args, name = scenario(6144, 24)
    assert args[args.index("--prefill-nodes") + 1] == "48"
    assert args[args.index("--decode-nodes") + 1] == "96"
    assert args[args.index("--max-len") + 1] == "48k" and args[-1] == "6144"
    assert "topology.prefill_group_nodes=2" in args and "topology.decode_group_nodes=4" in args
    assert name.startswith("24 units, 48P96D/6144 48K")
    args, name = scenario(256, 0)
    assert "--prefill-nodes" not in args and args[args.index("--max-len") + 1] == "64k"
    assert name == "2P4D/256 64K dualpath, seed 1"


def test_bad_flags_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--units", "-1"]) == 2
    assert "--units >= 0" in capsys.readouterr().err


def _fig(cpu: float, sim: float | None, turns: int) -> dict[str, float | int | None]:
    return {"cpu_s": cpu, "sim_cpu_s": sim, "turns": turns}


def test_summary_is_cpu_per_turn_old_over_new() -> None:
    res = summarise(
        {"old": [_fig(10, 6, 1000), _fig(12, 8, 1000)], "new": [_fig(5, 3, 500), _fig(5, 4, 500)]}
    )
    assert res["counted"] == "CPU inside simulate"
    assert res["us_per_turn"] == {"old": 7000.0, "new": 7000.0}
    assert res["ratio_old_over_new"] == 1.0
    assert res["us_per_turn_whole_child"] == {"old": 11000.0, "new": 10000.0}


def test_without_simulate_timing_on_one_side_both_count_the_whole_child() -> None:
    res = summarise({"old": [_fig(10, None, 1000)], "new": [_fig(5, 3, 1000)]})
    assert res["counted"] == "whole child CPU" and res["ratio_old_over_new"] == 2.0


@pytest.fixture
def trees_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "trees"
    monkeypatch.setenv("DUALPATH_TREES_DIR", str(folder))
    monkeypatch.setenv("DUALPATH_NATIVE", "0")
    yield folder
    for tree in folder.glob("*"):
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout"
)
def test_a_real_pair_against_head(trees_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "pair.json"
    assert main(["--against", "HEAD", "--agents", "4", "--runs", "1", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    old, new = res["runs"]["old"][0], res["runs"]["new"][0]
    assert old["turns"] == new["turns"] > 0 and old["emulated_s"] == new["emulated_s"]
    assert 0 < old["sim_cpu_s"] < old["cpu_s"] and res["compiled"] is False
    assert res["counted"] == "CPU inside simulate" and res["ratio_old_over_new"] > 0


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout"
)
def test_a_cached_tree_left_by_another_clone_is_checked_out_again(trees_dir: Path) -> None:
    from dualpath.bench.trees import _orphaned, checkout, resolve_commit

    sha = resolve_commit("HEAD")
    stale = trees_dir / sha
    stale.mkdir(parents=True)  # what a fresh clone finds: a `.git` link to metadata now gone
    (stale / ".git").write_text(f"gitdir: {trees_dir / 'gone' / '.git' / 'worktrees' / sha}\n")
    (stale / "left-over").write_text("from the old clone")
    tree = checkout("HEAD")
    assert tree.commit == sha and (tree.services / "dualpath" / "__main__.py").is_file()
    assert not (stale / "left-over").exists()
    foreign = trees_dir / "not-ours"  # a folder that is not a dangling worktree stays as it is
    foreign.mkdir()
    (foreign / ".git").write_text("not a link")
    assert not _orphaned(foreign) and not _orphaned(trees_dir / "missing")
