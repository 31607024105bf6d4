"""docker-compose.yml's parts that only `make compose-test` runs, checked offline.

The real test is `make compose-test` (.ci/containers): it needs a container engine. These
checks need none and catch, in a second, what would otherwise show only there: the `load`
profile's Locust wiring, the secrets shared by Redis, the services and Prometheus, and the
stand-in images made where no registry is reachable (scripts/containers/engine.sh) matching
the names compose and the Dockerfile use.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from dualpath.loadgen.options import SPECS, parse_options
from tests.paths import REPO

ROOT = REPO
SCRIPTS = ROOT / "scripts" / "containers"
LOCUSTFILE_IN_IMAGE = "/app/loadgen/locustfile.py"
# `${VAR:-default}` in compose: the name and the default
DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")


@cache
def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _argv(value: object) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value] if isinstance(value, list) else []


def _opt(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _serve_services() -> dict[str, list[str]]:
    out = {}
    for name, svc in _services().items():
        argv = _argv(svc.get("command"))
        if "entrypoint" not in svc and argv[:1] == ["serve"]:
            out[name] = argv
    return out


def _locust(role: str) -> tuple[str, dict[str, Any], list[str]]:
    found = [
        (n, s)
        for n, s in _services().items()
        if _argv(s.get("entrypoint")) == ["locust"] and f"--{role}" in _argv(s.get("command"))
    ]
    assert len(found) == 1, f"compose: want one Locust {role}, found {[n for n, _ in found]}"
    name, svc = found[0]
    return name, svc, _argv(svc["command"])


@cache
def _locust_flags() -> frozenset[str]:
    locust = shutil.which("locust", path=str(Path(sys.executable).parent)) or shutil.which("locust")
    if locust is None:
        pytest.skip("locust is not installed")
    proc = subprocess.run(
        [locust, "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", proc.stdout))


def _engine_var(name: str) -> str:
    m = re.search(rf"^{name}=(\S+)", (SCRIPTS / "engine.sh").read_text(), flags=re.MULTILINE)
    assert m, f"engine.sh defines no {name}"
    return m.group(1)


def _normalised(image: str) -> str:
    """Docker's reference normalisation: `redis:7` -> docker.io/library/redis:7."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


# --------------------------------------------------------------------------- load profile


def test_load_profile_is_a_locust_master_and_its_worker_from_the_project_image() -> None:
    cluster = _serve_services()
    project_image = _services()[next(iter(cluster))]["image"]
    master, msvc, margv = _locust("master")
    worker, wsvc, wargv = _locust("worker")
    for name, svc, argv in ((master, msvc, margv), (worker, wsvc, wargv)):
        assert svc.get("profiles") == ["load"], f"compose {name}: profile `load` only"
        assert svc["image"] == project_image, f"compose {name}: the project image"
        assert _opt(argv, "-f") == LOCUSTFILE_IN_IMAGE, f"compose {name}: -f"
        assert str(svc.get("restart", "no")) == "no", f"compose {name}: a job, not restarted"
    assert _opt(wargv, "--master-host") == master
    assert set(wsvc.get("depends_on") or []) == {master}
    # the master starts only against a serving cluster, waits (bounded) for its workers
    deps = msvc.get("depends_on") or {}
    assert {d: c.get("condition") for d, c in deps.items()} == {"scheduler": "service_healthy"}
    assert "--headless" in margv and _opt(margv, "--run-time"), "the master must end by itself"
    assert _opt(margv, "--expect-workers") == "1", "one worker service, one expected worker"
    assert _opt(margv, "--expect-workers-max-wait"), "bound the wait for workers"


def test_locust_master_targets_the_schedulers_api_at_its_dilation() -> None:
    cluster = _serve_services()
    scheduler = next(n for n, argv in cluster.items() if argv[1] == "scheduler")
    _, _, argv = _locust("master")
    host = urlsplit(_opt(argv, "--host") or "")
    assert host.hostname == scheduler, f"--host {host.geturl()}: not the scheduler service"
    assert str(host.port) == (_opt(cluster[scheduler], "--http-port") or "8000")
    # emulated seconds per wall second: Locust turns the scripts' times into wall time
    speedups = {_opt(a, "--speedup") or "1" for a in cluster.values()}
    assert len(speedups) == 1 and float(speedups.pop()) == float(_opt(argv, "--speedup") or 0)
    preset = {_opt(a, "--preset") for a in cluster.values()}
    assert preset == {_opt(argv, "--preset") or "smoke"}, "Locust replays the cluster's preset"


def test_locust_commands_use_only_real_options() -> None:
    ours = {s.flag: s for s in SPECS}
    theirs = _locust_flags()
    values: dict[str, str] = {}
    for role in ("master", "worker"):
        name, _, argv = _locust(role)
        flags = [a for a in argv if a.startswith("--")]
        unknown = [f for f in flags if f not in ours and f not in theirs]
        assert not unknown, f"compose {name}: neither Locust nor the locustfile knows {unknown}"
        values |= {ours[f].dest: _opt(argv, f) or "" for f in flags if f in ours}
    parse_options(values)  # the locustfile's own validation (raises OptionError)


def test_the_image_has_the_locustfile_at_the_path_compose_runs() -> None:
    assert (ROOT / "loadgen" / "locustfile.py").is_file()
    text = (ROOT / "Dockerfile").read_text()
    copies = re.findall(r"^COPY\s+loadgen/locustfile\.py\s+(\S+)", text, flags=re.MULTILINE)
    assert copies, "the Dockerfile does not copy loadgen/locustfile.py"
    workdirs = re.findall(r"^WORKDIR\s+(\S+)", text.split("COPY loadgen/locustfile.py")[0], re.M)
    dest = Path(workdirs[-1]) / copies[0]
    assert str(dest / "locustfile.py" if copies[0].endswith("/") else dest) == LOCUSTFILE_IN_IMAGE
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!loadgen/locustfile.py" in ignore, ".dockerignore keeps the locustfile out"


# --------------------------------------------------------------------------- secrets


def test_redis_password_is_one_value_for_server_healthcheck_and_clients() -> None:
    redis = _services()["redis"]
    argv = _argv(redis["command"])
    password = _opt(argv, "--requirepass")
    assert password and DEFAULTED.fullmatch(password), "redis: --requirepass ${VAR:-default}"
    assert redis["environment"]["REDISCLI_AUTH"] == password, "the healthcheck's redis-cli"
    assert _argv(redis["healthcheck"]["test"])[1:] == ["redis-cli", "ping"]
    for name, serve in _serve_services().items():
        url = urlsplit(_opt(serve, "--redis-url") or "")
        assert url.password == password and url.hostname == "redis", f"compose {name}: {url}"


def test_prometheus_sends_the_token_the_services_default_to() -> None:
    tokens = set()
    for name in _serve_services():
        env = _services()[name]["environment"]
        m = DEFAULTED.fullmatch(str(env["DUALPATH_TOKEN"]))
        assert m and m.group(1) == "DUALPATH_TOKEN", f"compose {name}: DUALPATH_TOKEN"
        tokens.add(m.group(2))
    assert len(tokens) == 1, f"services default to different tokens: {tokens}"
    config = yaml.safe_load((ROOT / "monitoring" / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        auth = job.get("authorization") or {}
        assert auth.get("type") == "Bearer" and auth.get("credentials") in tokens, job["job_name"]


def test_prometheus_keeps_its_data_where_its_image_lets_it_write() -> None:
    argv = _argv(_services()["prometheus"]["command"])
    # compose replaces the image's CMD, and with it the official image's storage path
    assert "--storage.tsdb.path=/prometheus" in argv
    containerfile = (SCRIPTS / "images" / "prometheus.Containerfile").read_text()
    assert "chown nobody:nogroup /prometheus" in containerfile and "USER nobody" in containerfile


# --------------------------------------------------------------------------- stand-ins


def test_stand_in_images_carry_the_names_compose_and_the_dockerfile_use() -> None:
    # grafana's image exists only in a registry: its profile is not run offline
    offline = {n: s for n, s in _services().items() if s.get("profiles") != ["grafana"]}
    images = {_normalised(str(s["image"])) for s in offline.values() if "build" not in s}
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert base, "the Dockerfile has no `ARG BASE_IMAGE=...` default"
    made = {_engine_var(v) for v in ("PYTHON_IMAGE", "REDIS_IMAGE", "PROMETHEUS_IMAGE")}
    assert made == images | {_normalised(base.group(1))}, f"engine.sh makes {made}"
    for name in ("redis.Containerfile", "prometheus.Containerfile"):
        text = (SCRIPTS / "images" / name).read_text()
        assert f"ARG BASE={_engine_var('BASE_IMAGE')}" in text, f"{name}: FROM the local base"


def test_scripts_are_strict_executable_bash() -> None:
    scripts = [*sorted(SCRIPTS.glob("*.sh")), ROOT / ".ci" / "containers"]
    bash = shutil.which("bash")
    assert bash is not None
    for path in scripts:
        assert path.stat().st_mode & 0o111, f"{path.name}: not executable"
        assert "set -euo pipefail" in path.read_text(), f"{path.name}: set -euo pipefail"
        proc = subprocess.run(
            [bash, "-n", str(path)], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, f"{path.name}: {proc.stderr}"
    assert "make compose-test" in (ROOT / ".ci" / "containers").read_text()


def test_cluster_report_asks_every_cluster_service() -> None:
    text = (SCRIPTS / "cluster_report.py").read_text()
    m = re.search(r"^SERVICES = \(([^)]*)\)", text, flags=re.MULTILINE)
    assert m, "cluster_report.py: no SERVICES tuple"
    asked = set(re.findall(r'"(\w+)"', m.group(1)))
    cluster = _serve_services()
    assert asked == set(cluster), f"cluster_report.py asks {asked}, compose runs {set(cluster)}"
    ports = {_opt(argv, "--grpc-port") for argv in cluster.values()}
    assert ports == {"50051"}, f"cluster_report.py dials :50051, compose serves {ports}"
