"""`dualpath cluster ...` without a container engine: argument handling and its one-line
errors, then the control logic (services/dualpath/deploy/containers/) against a fake Docker client
that behaves as podman 4.3 did when measured (docs/containers.md). The real engine is
exercised by `make compose-test` (scripts/containers/compose-test.sh, step `faults`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.deploy.containers import control
from dualpath.deploy.containers.clients import Turn, Window, summarize
from dualpath.deploy.containers.control import Cluster, ControlError
from dualpath.deploy.containers.faults import ContainerFaults, parse, parse_all, run
from dualpath.model.faults.spec import FaultError

pytestmark = pytest.mark.timeout(30)
NET = "dualpath_default"


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["cluster", *args], env=env, prog_name="dualpath")


def _one_line(res: Any, needle: str) -> None:
    assert res.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], res.stderr


# ---------------------------------------------------------------- arguments (no engine)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["pause"], "Missing argument 'NODE'"),
        (["status", "--bogus"], "--bogus"),
        (["nope"], "No such command 'nope'"),
        (["faults"], "give at least one --fault"),
        (["faults", "--fault", "degrade:prefill0.snic=40@0+300"], "not applied to containers"),
        (["faults", "--fault", "crash:decode0@1"], "kill, pause, redis-drop, partition"),
        (["faults", "--fault", "partition:prefill0@x+1"], "AT 'x'"),
        (["faults", "--fault", "partition@1+1"], "partition:NODE@AT[+FOR]"),
        (["faults", "--fault", "pause:decode0@1"], "pause needs a duration"),
        (["faults", "--fault", "kill:decode0@1", "--speedup", "0"], "--speedup 0.0"),
        (["faults", "--fault", "kill:decode0@1", "--speedup", "nan"], "--speedup nan"),
        (["unpause", "decode0", "--watch", "-1"], "--watch -1.0"),
        (["restart", "decode0", "--timeout", "9999"], "--timeout 9999"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args: list[str], needle: str) -> None:
    _one_line(_invoke(*args), needle)


@pytest.mark.parametrize(
    "args", [["status"], ["kill", "decode0"], ["faults", "--fault", "kill:decode0@1"]]
)
def test_no_engine_names_what_to_do(args: list[str]) -> None:
    res = _invoke(*args, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    _one_line(res, "no container engine answers at unix:///nonexistent/docker.sock")
    assert "engine.sh up" in res.stderr


# ---------------------------------------------------------------- a fake engine


class FakeContainer:
    def __init__(self, service: str, ip: str, project: str = "dualpath") -> None:
        self.id = f"{service:0<12}{'f' * 52}"
        self.name = f"{project}-{service}-1"
        self.status = "running"
        self.labels = {
            control.PROJECT_LABEL: project,
            control.SERVICE_LABEL: service,
            control.NUMBER_LABEL: "1",
            control.ONEOFF_LABEL: "False",
        }
        ep = {
            "IPAddress": ip,
            "GlobalIPv6Address": "",
            "Aliases": [self.name, service, self.id[:12]],
        }
        self.attrs: dict[str, Any] = {
            "State": {"Health": {"Status": "healthy"}, "ExitCode": 0, "StartedAt": "t0"},
            "RestartCount": 0,
            "NetworkSettings": {"Networks": {NET: ep}},
        }
        self.calls: list[str] = []
        self.on_reload: list[Any] = []  # scripted state changes, one per reload()

    def _do(self, what: str, status: str) -> None:
        self.calls.append(what)
        self.status = status

    def kill(self) -> None:
        self._do("kill", "exited")

    def start(self) -> None:
        self._do("start", "running")

    def pause(self) -> None:
        self._do("pause", "paused")

    def unpause(self) -> None:
        self._do("unpause", "running")

    def restart(self, timeout: int) -> None:
        self._do(f"restart {timeout}", "running")

    def reload(self) -> None:
        if self.on_reload:
            self.on_reload.pop(0)(self)


class FakeNetwork:
    def __init__(self, name: str, engine: Engine) -> None:
        self.name, self.engine = name, engine

    def disconnect(self, c: FakeContainer) -> None:
        del c.attrs["NetworkSettings"]["Networks"][self.name]

    def connect(
        self,
        c: FakeContainer,
        ipv4_address: str | None = None,
        ipv6_address: str | None = None,
        aliases: list[str] | None = None,
    ) -> None:
        if ipv4_address in self.engine.taken:
            raise APIError("address already in use")
        ip = ipv4_address or "10.89.0.99"  # a new one, as podman hands out
        # the engine adds the short id; no service alias unless asked (podman 4.3)
        al = [*(aliases or []), c.id[:12]]
        c.attrs["NetworkSettings"]["Networks"][self.name] = {"IPAddress": ip, "Aliases": al}
        self.engine.connects.append((c.name, ipv4_address, aliases))


class FakeContainers:
    def __init__(self, containers: list[FakeContainer]) -> None:
        self.all = containers

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[Any]:
        want = (filters or {}).get("label")
        return [
            c
            for c in self.all
            if want in (None, f"{control.PROJECT_LABEL}={c.labels[control.PROJECT_LABEL]}")
        ]


class FakeNetworks:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def list(self, filters: dict[str, str] | None = None) -> list[FakeNetwork]:
        return [FakeNetwork(NET, self.engine)]

    def get(self, name: str) -> FakeNetwork:
        return FakeNetwork(name, self.engine)


class Engine:
    """The parts of docker.DockerClient that deploy/containers/control.py uses."""

    def __init__(self, *containers: FakeContainer) -> None:
        self.all = list(containers)
        self.taken: set[str] = set()  # addresses given to other containers meanwhile
        self.connects: list[tuple[str, str | None, list[str] | None]] = []
        self.containers = FakeContainers(self.all)
        self.networks = FakeNetworks(self)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Engine:
    eng = Engine(
        FakeContainer("decode0", "10.89.0.86"),
        FakeContainer("prefill0", "10.89.0.85"),
        FakeContainer("redis", "10.89.0.83"),
    )
    monkeypatch.setattr(control, "engine_client", lambda: eng)
    monkeypatch.setenv("DUALPATH_STATE_DIR", str(tmp_path))
    return eng


def _container(eng: Engine, service: str) -> FakeContainer:
    return next(c for c in eng.all if c.labels[control.SERVICE_LABEL] == service)


def test_no_such_project_or_service(engine: Engine) -> None:
    _one_line(
        _invoke("status", "--project", "other"),
        "no container of compose project 'other' (projects there: dualpath)",
    )
    _one_line(
        _invoke("pause", "decode7"),
        "no service 'decode7' in compose project 'dualpath'; its services: decode0, prefill0, "
        "redis",
    )
    _one_line(_invoke("faults", "--fault", "kill:decode7@1"), "no service 'decode7'")


def test_status_and_actions(engine: Engine) -> None:
    res = _invoke("status")
    assert res.exit_code == 0 and "dualpath-prefill0-1" in res.stdout and "healthy" in res.stdout
    for verb, call in (
        ("kill", "kill"),
        ("start", "start"),
        ("pause", "pause"),
        ("restart", "restart 15"),
    ):
        res = _invoke(verb, "decode0")
        assert res.exit_code == 0, res.stderr
        assert _container(engine, "decode0").calls[-1] == call


def test_partition_then_heal_restores_address_and_alias(engine: Engine) -> None:
    c = _container(engine, "prefill0")
    assert _invoke("partition", "prefill0").exit_code == 0
    assert c.attrs["NetworkSettings"]["Networks"] == {}
    assert '"partitioned": true' in _invoke("status", "--json").stdout
    res = _invoke("heal", "prefill0")
    assert res.exit_code == 0, res.stderr
    ep = c.attrs["NetworkSettings"]["Networks"][NET]
    assert ep["IPAddress"] == "10.89.0.85"  # where the service still listens
    assert ep["Aliases"][0] == "prefill0"  # peers resolve the service name again
    assert c.calls == []  # nothing restarted: it listens where it did
    assert engine.connects == [
        ("dualpath-prefill0-1", "10.89.0.85", ["prefill0", "dualpath-prefill0-1"])
    ]
    assert "not partitioned" in _invoke("heal", "prefill0").stdout


def test_heal_with_the_address_taken_restarts_the_node(engine: Engine) -> None:
    c = _container(engine, "prefill0")
    _invoke("partition", "prefill0")
    engine.taken.add("10.89.0.85")
    res = _invoke("heal", "prefill0")
    assert res.exit_code == 0 and "restarted" in res.stdout
    assert c.calls[-1] == "restart 15"
    assert c.attrs["NetworkSettings"]["Networks"][NET]["Aliases"][0] == "prefill0"


def _fenced(restarted_by_engine: bool) -> Any:
    def exit75(c: FakeContainer) -> None:
        c.status = "exited"
        c.attrs["State"]["ExitCode"] = 75
        if restarted_by_engine:
            c.status, c.attrs["RestartCount"] = "running", 1

    return exit75


@pytest.mark.parametrize(
    ("by_engine", "outcome"),
    [
        (True, "restart policy started it again"),
        (False, "exited (75) and the engine did not restart it: started here"),
    ],
)
def test_unpause_watches_a_fenced_node(engine: Engine, by_engine: bool, outcome: str) -> None:
    t = [0.0]
    cluster = Cluster(
        engine, "dualpath", clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s)
    )  # type: ignore[arg-type]
    c = _container(engine, "decode0")
    c.status = "paused"
    c.on_reload = [lambda c: None, _fenced(by_engine)]
    assert outcome in cluster.unpause("decode0", watch_s=10)
    assert c.status == "running"


# ---------------------------------------------------------------- the schedule


def test_grammar() -> None:
    assert str(parse("partition:prefill0@5+10")) == "partition:prefill0@5+10"
    assert parse("partition:prefill0@5").for_s == 0
    assert [f.kind for f in parse_all(["redis-drop@3+1", "kill:decode0@1+2"])] == [
        "kill",
        "redis-drop",
    ]
    with pytest.raises(FaultError, match="partition:NODE"):
        parse("partition:@1")


class FakeActions:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, verb: str) -> Any:
        def act(service: str, **kw: Any) -> str:
            self.calls.append(f"{verb} {service}")
            if service == "bad":
                raise ControlError("refused")
            return "ok"

        return act


def test_schedule_applies_and_ends_each_fault_at_its_time() -> None:
    t = [0.0]
    acts = FakeActions()
    specs = ["pause:decode0@1+2", "partition:prefill0@2+2", "redis-drop@0.5+1", "kill:bad@1"]
    cf = ContainerFaults(parse_all(specs), acts, 0.0, 2.0, clock=lambda: t[0])  # type: ignore[arg-type]
    log = run(cf, sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert acts.calls == [
        "pause redis", "pause decode0", "kill bad", "unpause redis",
        "partition prefill0", "unpause decode0", "heal prefill0",
    ]  # fmt: skip
    assert [e["t_s"] for e in log] == [0.5, 1, 1, 1.5, 2, 3, 4]  # emulated s at dilation 2
    assert t[0] == 2.0 and cf.failed == 1 and "refused" in log[2]["detail"]


def test_interrupted_schedule_ends_the_faults_in_force() -> None:
    t = [0.0]
    acts = FakeActions()

    def sleep(s: float) -> None:
        if t[0] >= 1:
            raise KeyboardInterrupt
        t[0] += s

    cf = ContainerFaults(
        parse_all(["pause:decode0@1+9", "kill:prefill0@1", "pause:redis@5+1"]),
        acts,
        0.0,
        1.0,
        clock=lambda: t[0],
    )  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        run(cf, sleep=sleep)
    assert acts.calls == ["pause decode0", "kill prefill0", "unpause decode0"]


def test_summary_of_what_clients_saw() -> None:
    turns = [
        Turn(0, "s", 0, 0.0, 0.3, "200"),
        Turn(0, "s", 1, 1.0, 9.0, "503", "turn 17 failed: node decode0 was lost"),
        Turn(1, "s", 0, 1.5, 8.0, "503", "turn 18 failed: node decode0 was lost"),
        Turn(1, "t", 0, 12.0, 0.5, "200"),
    ]
    s = summarize(turns, [Window("pause decode0", 0.9, 1.0, 11.0, 20.0)])
    w = s["windows"][0]
    assert w["statuses"] == {"200": 1, "503": 2} and w["longest_s"] == 9.0
    assert w["recovered_s"] == 1.5  # the turn started at 12 s ended at 12.5 s
    assert w["reasons"] == {"turn N failed: node decode0 was lost": 2}
