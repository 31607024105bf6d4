"""The deployment files stay honest: compose, Kubernetes, Dockerfile, Makefile, CI and proto.

No Docker engine or cluster exists where these tests run, so the files are checked offline:
they parse and keep their invariants, every `dualpath` subcommand and option they use is
real (`dualpath <sub> --help`), every preset they name ships with the package, the
kustomize overlays render (when kubectl is installed), and the protobuf definitions compile
with grpcio-tools' bundled protoc and load against the installed runtimes.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROJECT_IMAGE = "dualpath-testbed"
PROTO_ROOT = ROOT / "proto"
PROTO_FILES = sorted((PROTO_ROOT / "dualpath" / "rpc" / "v1").glob("*.proto"))
KUSTOMIZATIONS = [
    ROOT / "k8s" / "base",
    *sorted(p for p in (ROOT / "k8s" / "overlays").iterdir() if p.is_dir()),
]
# Subcommands that run to completion and exit: a compose service running one needs no
# healthcheck (it is a job, not a server).
ONE_SHOT_SUBCOMMANDS = {"sim", "roofline"}
MAKE_TARGETS = {"install", "run", "test", "bench", "lint", "proto", "clean"}
# What the later gRPC runtime carries (DESIGN.md §3, §7): message -> fields it must have.
PROTO_MESSAGES = {
    "BlockRange": {"session", "start", "stop"},
    "ChargeRequest": {"links", "nbytes", "vl", "payload"},
    "ReadBlocksRequest": {"range", "target", "nbytes", "payload_scale"},
    "WriteBlocksRequest": {"ranges", "digests", "nbytes"},
    "TurnRequest": {"rid", "session", "prompt", "gen", "pe", "de", "path"},
    "ReadKvRequest": {"reserve_bytes", "range", "nbytes"},
    "Report": {"kind", "rid", "t_first", "t_second", "t_last"},
}

Invocation = tuple[str, list[str]]  # (where it is written, argv after `dualpath`)


# --------------------------------------------------------------------------- helpers


def _image_repo(image: str) -> str:
    """`registry:5000/dualpath-testbed:${TAG:-dev}` -> `registry:5000/dualpath-testbed`."""
    image = image.split("@", 1)[0]
    head, _, last = image.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


@cache
def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


def _compose_services() -> dict[str, dict[str, Any]]:
    services = _compose().get("services")
    assert isinstance(services, dict) and services, "docker-compose.yml has no services"
    return services


def _is_project_service(svc: dict[str, Any]) -> bool:
    return "build" in svc or _image_repo(str(svc.get("image", ""))) == PROJECT_IMAGE


def _argv(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    assert isinstance(value, list), f"{where}: command is neither a string nor a list"
    return [str(v) for v in value]


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _walk_args(node: object) -> Iterator[list[str]]:
    """Container `args` in manifests, and `args` values set by JSON 6902 patches."""
    if isinstance(node, dict):
        args = node.get("args")
        if isinstance(args, list) and ("image" in node or "name" in node):
            yield [str(a) for a in args]
        if str(node.get("path", "")).endswith("/args") and isinstance(node.get("value"), list):
            yield [str(a) for a in node["value"]]
        for key, value in node.items():
            if key == "patch" and isinstance(value, str):
                yield from _walk_args(yaml.safe_load(value))
            else:
                yield from _walk_args(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk_args(item)


def _makefile_vars(text: str) -> dict[str, str]:
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^([A-Z_]+)\s*\??:?=\s*(.*)$", text, flags=re.MULTILINE)
    }


@cache
def _invocations() -> tuple[Invocation, ...]:
    found: list[Invocation] = []
    instr = _dockerfile_instructions()
    cmds = [json.loads(rest) for op, rest in instr if op == "CMD"]
    found += [("Dockerfile CMD", [str(a) for a in c]) for c in cmds[-1:]]
    for name, svc in _compose_services().items():
        if _is_project_service(svc) and "command" in svc:
            found.append((f"compose {name}", _argv(svc["command"], f"compose {name}")))
    for path in sorted((ROOT / "k8s").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            found += [(str(path.relative_to(ROOT)), argv) for argv in _walk_args(doc)]
    makefile = (ROOT / "Makefile").read_text()
    variables = _makefile_vars(makefile)
    for m in re.finditer(r"^\t.*\$\(DUALPATH\)\s+(.*)$", makefile, flags=re.MULTILINE):
        line = re.sub(r"\$\((\w+)\)", lambda v: variables.get(v.group(1), v.group(0)), m.group(1))
        found.append(("Makefile", shlex.split(line)))
    return tuple(found)


def _dualpath(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("dualpath")
    cmd = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from dualpath.cli import main; main()"]
    )
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@cache
def _render(kustomization: Path) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    proc = subprocess.run(
        [kubectl, "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {kustomization}:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj.get("kind") in {"Job", "Deployment", "StatefulSet", "DaemonSet"}:
        spec: dict[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    return None


def _protoc(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            f"--plugin=protoc-gen-mypy_grpc={Path(sys.executable).parent / 'protoc-gen-mypy_grpc'}",
            f"--mypy_grpc_out={out}",
            *(str(p) for p in PROTO_FILES),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --------------------------------------------------------------------------- compose


def test_compose_services_are_healthchecked_or_one_shot() -> None:
    for name, svc in _compose_services().items():
        health = svc.get("healthcheck")
        if health and not health.get("disable"):
            assert health.get("test"), f"compose {name}: healthcheck without a test"
            for key in ("interval", "start_period"):
                assert key in health, f"compose {name}: set healthcheck.{key} explicitly"
            continue
        argv = _argv(svc.get("command", []), f"compose {name}")
        assert _is_project_service(svc) and argv[:1] and argv[0] in ONE_SHOT_SUBCOMMANDS, (
            f"compose {name}: a long-running service needs a healthcheck"
        )
        assert str(svc.get("restart", "no")) == "no", f"compose {name}: one-shot must not restart"


def test_compose_project_services_share_one_image() -> None:
    project = {n: s for n, s in _compose_services().items() if _is_project_service(s)}
    assert project, "no service runs the project image"
    images = {str(s.get("image")) for s in project.values()}
    builds = {json.dumps(s.get("build"), sort_keys=True) for s in project.values()}
    assert len(images) == 1 and len(builds) == 1, f"project services differ: {images} {builds}"
    assert _image_repo(images.pop()) == PROJECT_IMAGE
    build = project[next(iter(project))]["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (ROOT / context / dockerfile).is_file()


def test_compose_references_resolve() -> None:
    services = _compose_services()
    declared_volumes = set(_compose().get("volumes") or {})
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep, cond in deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps):
            assert dep in services, f"compose {name}: depends on unknown service {dep}"
            if cond.get("condition") == "service_healthy":
                assert services[dep].get("healthcheck"), f"compose {dep}: needs a healthcheck"
        for vol in svc.get("volumes", []):
            source = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
            if source and not source.startswith((".", "/", "~", "$")):
                assert source in declared_volumes, f"compose {name}: undeclared volume {source}"


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_one_slim_image_non_root_dualpath_entrypoint() -> None:
    instr = _dockerfile_instructions()
    froms = [rest for op, rest in instr if op == "FROM"]
    assert froms == ["python:3.11-slim"], froms
    users = [rest.split(":", 1)[0] for op, rest in instr if op == "USER"]
    assert users and users[-1] not in {"root", "0"}, "the image must run as a non-root user"
    entrypoints = [json.loads(rest) for op, rest in instr if op == "ENTRYPOINT"]
    assert entrypoints[-1:] == [["dualpath"]]
    assert (ROOT / ".dockerignore").is_file()


# --------------------------------------------------------------------------- CLI


def test_every_dualpath_command_in_deploy_files_is_real() -> None:
    invocations = _invocations()
    sources = {w.split(" ")[0].split("/")[0] for w, _ in invocations}
    assert sources >= {"Dockerfile", "compose", "k8s", "Makefile"}, sources
    help_by_sub: dict[str, str] = {}
    problems = []
    for place, argv in invocations:
        sub = argv[0]
        if sub not in help_by_sub:
            proc = _dualpath(sub, "--help")
            help_by_sub[sub] = proc.stdout if proc.returncode == 0 else ""
            if proc.returncode != 0:
                problems.append(f"{place}: `dualpath {sub} --help` failed:\n{proc.stderr[-2000:]}")
                continue
        for opt in (a.split("=", 1)[0] for a in argv[1:] if a.startswith("--")):
            if help_by_sub[sub] and not re.search(rf"{re.escape(opt)}\b", help_by_sub[sub]):
                problems.append(f"{place}: `dualpath {sub}` has no option {opt}")
    assert not problems, "\n".join(problems)


def test_every_preset_named_in_deploy_files_ships_with_the_package() -> None:
    presets = importlib.resources.files("dualpath") / "presets"
    missing = []
    for place, argv in _invocations():
        for flag, value in itertools.pairwise(argv):
            if flag != "--preset" or value.endswith((".yaml", ".yml")):
                continue
            if not (presets / f"{value}.yaml").is_file():
                missing.append(f"{place}: preset {value}")
    assert not missing, "\n".join(missing)


# --------------------------------------------------------------------------- Makefile and CI


def test_makefile_has_the_documented_targets_and_real_modules() -> None:
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", text, flags=re.MULTILINE))
    assert targets >= MAKE_TARGETS, f"missing targets: {MAKE_TARGETS - targets}"
    for module in re.findall(r"-m\s+(dualpath(?:\.\w+)+)", text):
        assert importlib.util.find_spec(module) is not None, f"Makefile runs missing {module}"
    make = shutil.which("make")
    if make is not None:
        proc = subprocess.run(
            [make, "-s", "-C", str(ROOT), "help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert set(proc.stdout.split()) >= MAKE_TARGETS


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = ROOT / ".ci" / "run"
    text = ci.read_text()
    assert "set -euo pipefail" in text
    proc = subprocess.run(
        ["bash", "-n", str(ci)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"(make test[a-z-]*|pytest[^`]*)", readme)
    assert match, "README.md names no test command"
    command = match.group(1).strip()
    ci_lines = [line.strip() for line in text.splitlines()]
    assert any(line.startswith(command) for line in ci_lines), f".ci/run does not run {command}"


# --------------------------------------------------------------------------- Kubernetes


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kustomization_renders_hardened_project_workloads(kustomization: Path) -> None:
    workloads = [(o, s) for o in _render(kustomization) if (s := _pod_spec(o)) is not None]
    assert workloads, f"{kustomization} renders no workload"
    for obj, spec in workloads:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        assert spec.get("securityContext", {}).get("runAsNonRoot") is True, name
        if obj["kind"] == "Job":
            assert spec.get("restartPolicy") in {"Never", "OnFailure"}, name
        volumes = {v["name"] for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            assert _image_repo(c["image"]) == PROJECT_IMAGE, f"{name}: image {c['image']}"
            limits = c.get("resources", {}).get("limits", {})
            requests = c.get("resources", {}).get("requests", {})
            assert {"cpu", "memory"} <= set(requests) and "memory" in limits, name
            assert c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, name
            assert "command" not in c, f"{name}: keep the image's `dualpath` entrypoint"
            assert c.get("args", [""])[0] in {argv[0] for _, argv in _invocations()}, name
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{name}: volume {mount['name']} undefined"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_overlays_use_one_image_and_distinct_names() -> None:
    images = set()
    names: dict[str, Path] = {}
    for kustomization in KUSTOMIZATIONS[1:]:
        for obj in _render(kustomization):
            if (spec := _pod_spec(obj)) is not None:
                images |= {c["image"] for c in spec["containers"]}
                key = f"{obj['kind']}/{obj['metadata']['name']}"
                assert key not in names, f"{key} in both {names.get(key)} and {kustomization}"
                names[key] = kustomization
    assert len(images) == 1, f"overlays run different images: {images}"


# --------------------------------------------------------------------------- proto

_LOAD_GENERATED = """
import json, sys
sys.path.insert(0, sys.argv[1])
import dualpath
assert dualpath.__file__.startswith(sys.argv[1]), dualpath.__file__
from dualpath.rpc.v1 import kv_pb2, kv_pb2_grpc, node_pb2, scheduler_pb2, scheduler_pb2_grpc
messages, services, packages = {}, {}, set()
for mod in (kv_pb2, node_pb2, scheduler_pb2):
    packages.add(mod.DESCRIPTOR.package)
    for name, desc in mod.DESCRIPTOR.message_types_by_name.items():
        messages[name] = [f.name for f in desc.fields]
    for name, desc in mod.DESCRIPTOR.services_by_name.items():
        services[name] = [m.name for m in desc.methods]
t = kv_pb2.WriteBlocksRequest(ranges=[kv_pb2.BlockRange(session=7, start=0, stop=4)],
                              digests=[2**63], nbytes=1 << 20, vl=2)
assert kv_pb2.WriteBlocksRequest.FromString(t.SerializeToString()) == t
print(json.dumps({"packages": sorted(packages), "messages": messages, "services": services}))
"""


def test_proto_compiles_and_loads_with_installed_runtimes(tmp_path: Path) -> None:
    assert PROTO_FILES, "no .proto files under proto/dualpath/rpc/v1"
    proc = _protoc(tmp_path)
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "dualpath"
    for d in (pkg, pkg / "rpc", pkg / "rpc" / "v1"):
        (d / "__init__.py").touch()
    load = subprocess.run(
        [sys.executable, "-c", _LOAD_GENERATED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert load.returncode == 0, load.stderr
    found = json.loads(load.stdout)
    assert found["packages"] == ["dualpath.rpc.v1"]
    for message, fields in PROTO_MESSAGES.items():
        assert message in found["messages"], f"proto lacks message {message}"
        assert fields <= set(found["messages"][message]), f"{message}: {found['messages']}"
    assert found["services"], "proto defines no service"


def test_committed_generated_code_is_current(tmp_path: Path) -> None:
    committed = ROOT / "services" / "dualpath" / "rpc" / "v1"
    files = sorted(p.name for p in committed.glob("*_pb2*.py*")) if committed.is_dir() else []
    if not files:
        pytest.skip("generated gRPC code is not committed yet (`make proto` writes it)")
    proc = _protoc(tmp_path)
    assert proc.returncode == 0, proc.stderr
    fresh = tmp_path / "dualpath" / "rpc" / "v1"
    assert sorted(p.name for p in fresh.glob("*_pb2*.py*")) == files, "run `make proto`"
    stale = [f for f in files if (fresh / f).read_bytes() != (committed / f).read_bytes()]
    assert not stale, f"stale generated code, run `make proto`: {stale}"
