"""Experiment sweeps as Kubernetes Indexed Jobs (`dualpath experiment NAME --emit k8s`).

The emitted Job passes the Kubernetes schema (strict); running every index locally with
the command its pod would run (its args, with $(VAR) expanded as Kubernetes does) and
then `--collect` gives the summary the local runner gives; stages after `more()` and
missing or failed indexes are reported with the command that fixes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.experiments import Experiment, Results, RunSpec, Summary, experiments, run_experiment
from dualpath.experiments.indexed import run_index
from dualpath.experiments.scenarios import ARM_27B, build
from dualpath.experiments.stages import StageError, stage_specs
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.virtual import sim
from tests.deploy.test_deploy_k8s import validate_strict

QUIET = Console(quiet=True)
RUNNER = CliRunner()
EXPERIMENT = "pd-ratio"  # quick: 6 runs of about a second
# What differs between two runs of the same grid by design: wall clocks (the summary's and
# each run's), the worker count, and each run's status (ran here, or collected).
VOLATILE = {"wall_s", "jobs"}


def _dualpath(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dualpath", *args], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def _pod_argv(container: dict[str, Any], index: int, results: Path) -> list[str]:
    """The container's args as the kubelet expands them for pod `index`, with the volume's
    mount path mapped to a local folder."""
    env = {e["name"]: e.get("value") for e in container["env"]}
    env["RUN_INDEX"] = str(index)  # the downward API: the pod's completion index
    env["RESULTS_DIR"] = str(results)
    return [re.sub(r"\$\((\w+)\)", lambda m: str(env[m.group(1)]), a) for a in container["args"]]


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in summary.items() if k not in VOLATILE}
    out["runs"] = [
        {**{k: v for k, v in r.items() if k != "status"},
         "figures": {k: v for k, v in r["figures"].items() if k not in VOLATILE}}
        for r in summary["runs"]
    ]  # fmt: skip
    return out


def test_indexed_job_runs_the_grid_and_collects_the_local_summary(tmp_path: Path) -> None:
    emitted = tmp_path / "emitted"
    proc = _dualpath(["experiment", EXPERIMENT, "--quick", "--emit", "k8s", "--out", str(emitted),
                      "--parallelism", "3", "--pvc", "my-results"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    folder = emitted / EXPERIMENT / "k8s"
    assert sorted(p.name for p in folder.iterdir()) == [
        "collect-job.yaml", "job-stage1.yaml", "pvc.yaml"]  # fmt: skip
    docs = {p.name: yaml.safe_load(p.read_text()) for p in folder.iterdir()}
    for doc in docs.values():
        validate_strict(doc)
    job = docs["job-stage1.yaml"]
    grid = [s.key for s in experiments()[EXPERIMENT].plan(True)]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == len(grid) and job["spec"]["parallelism"] == 3
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "my-results"
    assert docs["pvc.yaml"]["metadata"]["name"] == "my-results"
    container = pod["containers"][0]
    assert "cpu" not in container["resources"]["limits"]
    # every index, as its pod would run it (one process each, `parallelism` at a time, as
    # the Job controller would), into one results folder
    results = tmp_path / "volume"
    with ThreadPoolExecutor(job["spec"]["parallelism"]) as pool:
        argvs = [_pod_argv(container, i, results) for i in range(len(grid))]
        for i, proc in enumerate(pool.map(_dualpath, argvs)):
            assert proc.returncode == 0, f"index {i}: {argvs[i]}\n{proc.stderr}"
            assert (results / EXPERIMENT / "runs" / f"{grid[i]}.json").is_file()
    collector = docs["collect-job.yaml"]["spec"]["template"]["spec"]["containers"][0]
    proc = _dualpath(_pod_argv(collector, 0, results))
    assert proc.returncode == 0, proc.stderr
    collected = json.loads((results / EXPERIMENT / "summary.json").read_text())
    assert (results / EXPERIMENT / "summary.md").is_file()
    assert {r["status"] for r in collected["runs"]} == {"collected"}
    # the local runner on the same grid, from the command line too (the same code as the
    # pods: a process started now, not this one's modules)
    proc = _dualpath(["experiment", EXPERIMENT, "--quick", "--jobs", "2", "--out",
                      str(tmp_path / "local")])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = json.loads((tmp_path / "local" / EXPERIMENT / "summary.json").read_text())
    # in plan order, however the two workers' runs happened to finish
    assert [r["key"] for r in expected["runs"]] == grid
    assert _comparable(collected) == _comparable(expected)
    pngs = sorted(p.name for p in (results / EXPERIMENT).glob("*.png"))
    assert pngs and pngs == sorted(p.name for p in (tmp_path / "local" / EXPERIMENT).glob("*.png"))


def _tiny(agents: int) -> Scenario:
    return build(ARM_27B, True, policy="basic", agents=agents, max_len="32k")


class Staged(Experiment):
    """Two runs, then one more per stage until three stages ran; run `bad` fails."""

    name = "staged"
    title = "test — staged sweep"

    def plan(self, quick: bool) -> list[RunSpec]:
        return [RunSpec("a1", _tiny(1)), RunSpec("bad", _tiny(2))]

    def more(self, quick: bool, results: Results) -> list[RunSpec]:
        n = len(results)
        return [] if n >= 4 else [RunSpec(f"a{n}", _tiny(n + 1))]

    def summarize(self, quick: bool, results: Results) -> Summary:
        return Summary(setup=[f"{len(results)} results", *sorted(results)])


def _fake(sc: Scenario, progress: Any = None) -> dict[str, Any]:
    if sc.workload.agents == 2:
        raise RuntimeError("boom")
    return {"scenario": sc.model_dump(mode="json"), "jct_s": float(sc.workload.agents)}


def test_stages_missing_and_failed_indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim, "simulate", _fake)
    exp = Staged()
    assert [s.key for s in stage_specs(exp, False, tmp_path, 1)] == ["a1", "bad"]
    with pytest.raises(StageError, match=r"--stage 2: run a1 of stage 1 has no result"):
        stage_specs(exp, False, tmp_path, 2)
    assert run_index(exp, tmp_path, False, 1, 0, False, QUIET) == 0
    partial = run_experiment(exp, tmp_path, collect=True, console=QUIET)
    assert any("stage 1: 1 of 2 run(s) have no result yet (index 1 (bad))" in p
               for p in partial.problems), partial.problems  # fmt: skip
    assert partial.exit_code == 1 and list(partial.records) == ["a1"]
    assert run_index(exp, tmp_path, False, 1, 1, False, QUIET) == 1  # fails: error file
    assert run_index(exp, tmp_path, False, 1, 0, False, QUIET) == 0  # done already: reused
    assert [s.key for s in stage_specs(exp, False, tmp_path, 2)] == ["a2"]
    waiting = run_experiment(exp, tmp_path, collect=True, console=QUIET)
    assert waiting.failed == ["bad"] and "boom" in (waiting.records["bad"].error or "")
    assert any("stage 2: 1 of 1 run(s)" in p and "--emit k8s --stage 2" in p
               for p in waiting.problems), waiting.problems  # fmt: skip
    assert run_index(exp, tmp_path, False, 2, 0, False, QUIET) == 0
    assert run_index(exp, tmp_path, False, 3, 0, False, QUIET) == 0
    with pytest.raises(StageError, match="needs no stage 4"):
        stage_specs(exp, False, tmp_path, 4)
    done = run_experiment(exp, tmp_path, collect=True, console=QUIET)
    local = run_experiment(exp, tmp_path / "local", jobs=1, console=QUIET)
    assert done.problems == [] and done.failed == local.failed == ["bad"]
    assert list(done.records) == list(local.records) == ["a1", "bad", "a2", "a3"]
    assert done.summary.setup == local.summary.setup


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--emit", "helm"], "--emit"),
        (["--emit", "k8s", "--index", "0"], "--emit and --index"),
        (["--index", "0", "--collect"], "--index and --collect"),
        (["--index", "-1"], "--index"),
        (["--index", "99"], "--index 99"),
        (["--stage", "0", "--index", "0"], "--stage"),
        (["--stage", "2"], "--stage"),
        (["--stage", "2", "--index", "0"], "--stage 2"),
        (["--parallelism", "2"], "--parallelism"),
        (["--emit", "k8s", "--parallelism", "0"], "--parallelism"),
        (["--emit", "k8s", "--pvc", "Bad_Name"], "--pvc"),
        (["--collect", "--force"], "--force"),
        (["--emit", "k8s", "--only", "x"], "--only"),
    ],
)
def test_bad_job_flags_are_one_line(args: list[str], flag: str, tmp_path: Path) -> None:
    result = RUNNER.invoke(
        app, ["experiment", EXPERIMENT, "--quick", *args, "--out", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and flag in err, err
