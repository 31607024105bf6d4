"""`dualpath deploy compose`: the committed docker-compose.yml is the generator's output, and
any scenario's file is one run of its topology with real commands (no Docker engine needed).

The cluster's wiring invariants on the committed file are tests/deploy/test_deploy_files.py's
and tests/deploy/test_compose_file.py's; here the same shape is checked on generated
files of other topologies, in a scratch folder (the generator refers to the repository root
as the working directory: it only needs a Dockerfile there).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.deploy.compose import SCENARIO_MOUNT
from dualpath.model.config.presets import resolve
from tests.deploy.test_deploy_files import ROOT, Invocation, _serve, unreal_options

RUNNER = CliRunner()
HEADER_PREFIX = "#   dualpath deploy compose "
VARIANT = ["--set", "topology.prefill_nodes=3", "--set", "topology.decode_nodes=5"]
VARIANT_OUT = "deploy/compose/ds660b-3p5d/docker-compose.yml"
JOBS = {"redis", "storage", "scheduler", "sim", "prometheus", "locust-master", "locust-worker",
        "grafana"}  # fmt: skip


def _recorded_command(path: Path) -> list[str]:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith(HEADER_PREFIX)]
    assert len(lines) == 1, f"{path}: no generator command in its header"
    return shlex.split(lines[0].removeprefix("#   "))[1:]


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _generate(*args: str) -> None:
    result = RUNNER.invoke(app, ["deploy", "compose", *args])
    assert result.exit_code == 0, result.stderr or result.stdout


def test_committed_compose_file_is_the_generators_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = _recorded_command(ROOT / "docker-compose.yml")
    assert argv[:2] == ["deploy", "compose"] and "--out" not in argv, argv
    result = RUNNER.invoke(app, [*argv, "--check"])
    assert result.exit_code == 0, result.stderr or result.stdout


def test_check_exits_1_with_a_diff_when_a_file_drifted(scratch: Path) -> None:
    _generate("--preset", "smoke")
    prom = scratch / "monitoring" / "prometheus.yml"
    prom.write_text(prom.read_text().replace("decode0:9100", "decode9:9100"))
    result = RUNNER.invoke(app, ["deploy", "compose", "--preset", "smoke", "--check"])
    assert result.exit_code == 1
    assert '-      - targets: ["decode9:9100"]' in result.stdout
    assert '+      - targets: ["decode0:9100"]' in result.stdout
    assert "dualpath deploy compose --preset smoke" in result.stderr
    assert prom.read_text().count("decode9") == 1, "--check must write nothing"


@pytest.mark.parametrize(
    ("args", "out", "shape"),
    [
        (["--preset", "paper-ds660b-2p4d"], "deploy/compose/paper-ds660b-2p4d/docker-compose.yml",
         (2, 4)),
        (["--preset", "paper-ds660b-2p4d", *VARIANT, "--out", VARIANT_OUT], VARIANT_OUT, (3, 5)),
    ],
)  # fmt: skip
def test_generated_file_is_one_run_of_its_topology(
    scratch: Path, args: list[str], out: str, shape: tuple[int, int]
) -> None:
    _generate(*args)
    path = scratch / out
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    services: dict[str, dict[str, Any]] = data["services"]
    prefill, decode = shape
    nodes = [f"prefill{i}" for i in range(prefill)] + [f"decode{i}" for i in range(decode)]
    assert set(services) == JOBS | set(nodes)

    cluster = {}
    for name, svc in services.items():
        if "entrypoint" not in svc and (serve := _serve(svc.get("command", []), name)):
            cluster[name] = serve
    assert set(cluster) == {"storage", "scheduler", *nodes}
    presets = {s.opts["--preset"] for s in cluster.values()}
    packaged = "--set" not in args
    assert presets == {"paper-ds660b-2p4d" if packaged else SCENARIO_MOUNT}
    for name, serve in cluster.items():
        assert serve.opts["--host"] == name and serve.opts["--run-id"] == "compose"
        if serve.role in {"prefill", "decode"}:
            assert name == f"{serve.role}{serve.opts['--node']}"
        test = services[name]["healthcheck"]["test"]
        assert test[-2:] == ["--grpc", f"{name}:{serve.opts['--grpc-port']}"], name
    master = services["locust-master"]["command"]
    assert master[master.index("--preset") + 1] in presets, "Locust replays the cluster's scenario"

    published = [str(p).split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert sorted(published) == ["3000", "8000", "9090"], published

    # what the containers run is that topology: the mounted file, or the packaged preset
    if packaged:
        scenario = resolve("paper-ds660b-2p4d", {}, [])
        assert not (path.parent / "scenario.yaml").exists()
    else:
        mount = f"./scenario.yaml:{SCENARIO_MOUNT}:ro"
        assert mount in data["x-dualpath"]["volumes"] and mount in services["sim"]["volumes"]
        scenario = resolve(str(path.parent / "scenario.yaml"), {}, [])
        assert scenario.name == "ds660b-3p5d"
    assert (scenario.topology.prefill_nodes, scenario.topology.decode_nodes) == shape
    assert data["x-dualpath"]["build"]["context"] == "../../.."

    prom = yaml.safe_load((path.parent / "monitoring" / "prometheus.yml").read_text())
    targets = {t for sc in prom["scrape_configs"][0]["static_configs"] for t in sc["targets"]}
    assert targets == {"scheduler:8000", "storage:9100", *(f"{n}:9100" for n in nodes)}

    invocations: list[Invocation] = [
        (f"{out} {n}", [str(a) for a in s["command"]])
        for n, s in services.items()
        if "entrypoint" not in s and "command" in s and "image" in s and "build" in s
    ]
    assert len(invocations) == len(cluster) + 1  # + sim
    problems = unreal_options(invocations)
    assert not problems, "\n".join(problems)

    # the header's command regenerates exactly these files
    argv = _recorded_command(path)
    result = RUNNER.invoke(app, [*argv, "--check"])
    assert result.exit_code == 0, result.stderr or result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "no-such-preset"], "no-such-preset"),
        (["--preset", "smoke", "--set", "topology.prefill_nodes"], "--set"),
        (["--preset", "smoke", "--set", "topology.prefill_nodes=2"], "--out: required"),
        (["--preset", "smoke", "--out", "Dockerfile/compose.yml"], "--out"),
        (["--preset", "smoke", "--out", "/abs/compose.yml"], "--out"),
    ],
)
def test_errors_exit_2_with_one_line(scratch: Path, args: list[str], message: str) -> None:
    result = RUNNER.invoke(app, ["deploy", "compose", *args])
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
