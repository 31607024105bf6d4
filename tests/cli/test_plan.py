"""`dualpath plan`: bad input is one line naming the flag, one real tiny search (the smoke
preset's 1P1D, real probes on virtual time), and its Indexed Job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dualpath.cli.main import app

pytestmark = pytest.mark.timeout(300)
GOOD = ["plan", "--model", "ds-27b", "--gpu", "h800", "--workload", "32k", "--gpus-max", "4",
        "--preset", "smoke"]  # fmt: skip
TINY = ["--duration", "20", "--window", "5", "--lookback", "10", "--budget", "1", "--width", "1",
        "--probes", "2", "--sample-agents", "8", "--jobs", "1"]  # fmt: skip


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), prog_name="dualpath")


def _with(flag: str, value: str) -> list[str]:
    args = list(GOOD)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--model", "gpt-9", "--model 'gpt-9': accepted: deepseek-v3"),
        ("--gpu", "tpu", "--gpu 'tpu': accepted: b200"),
        ("--workload", "10k", "--workload '10k': the agents' MaxLen; accepted: 32k, 48k, 64k"),
        ("--slo", "ttft=4", "--slo 'ttft=4': tpot missing; use --slo ttft=4,tpot=0.05"),
        ("--slo", "ttft=4,tpot=fast", "tpot='fast' must be seconds > 0"),
        (
            "--gpus-max",
            "3",
            "--gpus-max 3: the smallest candidate (1P1D, 2 GPUs per node) "
            "needs 4 GPUs; raise --gpus-max to at least 4",
        ),
        ("--policy", "fastest", "--policy 'fastest': unknown policy; accepted: "),
        ("--preset", "nope", "--preset: unknown preset 'nope'"),
        ("--budget", "0", "--budget must be at least 1, got 0"),
        ("--duration", "0", "--duration must be emulated seconds > 0"),
        ("--emit", "slurm", "--emit 'slurm': accepted: k8s"),
        ("--pvc", "x", "--pvc: only with --emit k8s"),
        ("--objective", "offline", "--objective offline: give --offline-agents N"),
        ("--objective", "cheapest", "--objective 'cheapest': accepted: online, offline"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(flag: str, value: str, needle: str) -> None:
    res = _invoke(*_with(flag, value))
    assert res.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert needle in lines[0], lines[0]


def test_a_model_without_a_paper_preset_asks_for_one() -> None:
    args = list(GOOD)
    del args[args.index("--preset") : args.index("--preset") + 2]
    args[args.index("ds-27b")] = "deepseek-v3"
    res = _invoke(*args)
    assert res.exit_code == 2 and "give --preset NAME|FILE.yaml" in res.stderr


def test_a_tiny_real_plan_ranks_and_prints_the_winner(tmp_path: Path) -> None:
    res = _invoke(*GOOD, *TINY, "--out", str(tmp_path))
    assert res.exit_code == 0, (res.stdout, res.stderr)
    out = tmp_path / "plan"
    doc = json.loads((out / "plan.json").read_text())
    assert doc["schema"] == "dualpath.plan/v1"
    assert doc["counts"]["candidates"] == 1 and doc["counts"]["run"] == 1
    row = doc["ranked"][0]
    assert row["key"] == "dualpath-1p1d-ep0-t0g" and row["gpus"] == 4 and row["probes"]
    assert row["bound_binding"] in {"prefill", "decode", "storage_read"}
    # seed 0: both probes (half the bound, then the bound) meet the SLO in 20 s
    assert doc["winner"]["key"] == row["key"] and row["at_bound"]
    assert "winner: dualpath-1p1d-ep0-t0g" in res.stdout
    assert doc["winner"]["command"] in res.stdout.replace("\n", "")
    assert row["aps_per_gpu"] == pytest.approx(row["aps"] / 4)
    md = (out / "plan.md").read_text()
    assert "| rank | policy | P/D |" in md and "Candidates: 1; run 1" in md
    assert (out / "pareto.png").stat().st_size > 0
    assert list((out / "runs").glob("dualpath-1p1d-ep0-t0g-aps*.json"))


def test_offline_objective_ranks_by_agents_per_second_of_the_jct_run(tmp_path: Path) -> None:
    args = [*GOOD, "--gpus-max", "6", "--objective", "offline", "--offline-agents", "3",
            "--budget", "2", "--width", "2", "--jobs", "1", "--out", str(tmp_path)]  # fmt: skip
    res = _invoke(*args)
    assert res.exit_code == 0, (res.stdout, res.stderr)
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert doc["counts"]["run"] + doc["counts"]["pruned"] + doc["counts"]["over_budget"] == 3
    for row in doc["ranked"]:
        assert row["aps"] == pytest.approx(3 / row["offline_jct_s"])
        assert row["aps"] <= row["bound_aps"]  # the bound holds for the run's own work
    assert "workload.mode=offline" in doc["winner"]["command"]
    assert not list((tmp_path / "plan" / "runs").glob("*-aps*.json"))  # no online probe


def test_emit_k8s_writes_jobs_whose_pods_ask_the_same_question(tmp_path: Path) -> None:
    res = _invoke(*GOOD, "--policy", "basic", "--slo", "ttft=2,tpot=0.04", "--ep", "1",
                  "--emit", "k8s", "--out", str(tmp_path))  # fmt: skip
    assert res.exit_code == 0, (res.stdout, res.stderr)
    job_file = tmp_path / "plan" / "k8s" / "job-stage1.yaml"
    job = yaml.safe_load(job_file.read_text())
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "plan" and "--index" in args and "$(RUN_INDEX)" in args
    assert args[args.index("--slo") + 1] == "ttft=2,tpot=0.04"
    assert job["spec"]["completions"] == 1 and job["spec"]["completionMode"] == "Indexed"
    collect = yaml.safe_load((tmp_path / "plan" / "k8s" / "collect-job.yaml").read_text())
    assert collect["spec"]["template"]["spec"]["containers"][0]["args"][-3] == "--collect"
    # The pods' flags ask the same question: emitting from them writes the same Job.
    flags = args[1 : args.index("--stage")]
    again = _invoke("plan", *flags, "--emit", "k8s", "--out", str(tmp_path / "again"))
    assert again.exit_code == 0, again.stderr
    twin = yaml.safe_load((tmp_path / "again" / "plan" / "k8s" / "job-stage1.yaml").read_text())
    assert twin["spec"] == job["spec"]


def test_collect_without_results_names_the_plan_command_that_runs_them(tmp_path: Path) -> None:
    res = _invoke(*GOOD, "--collect", "--out", str(tmp_path))
    assert res.exit_code == 1, (res.stdout, res.stderr)
    line = " ".join(res.stderr.split())
    assert "stage 1: 1 of 1 run(s) have no result yet" in line
    assert "dualpath plan --model ds-27b" in line and "dualpath experiment plan" not in line
