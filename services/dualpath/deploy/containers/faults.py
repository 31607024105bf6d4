"""A fault schedule against the containers of a compose cluster.

The grammar of `dualpath up --fault` (model/faults/spec.py), read by the same parser, plus one
kind only containers have. Times are emulated seconds from when the schedule starts; wall
seconds = emulated ÷ the cluster's dilation (compose serves at --speedup 1 unless its
command says otherwise). The structure follows runtimes/process/launcher/faults.py: a sorted list
of due
starts and ends, applied by `step()` when their time has come.

kill       `kill` (SIGKILL); `start` after FOR (without FOR: stays down; neither engine
           restarts a container killed through its API)
pause      `pause`, then `unpause` (cgroup freezer): a hung node. Past its 3 s lease an
           engine node fences itself as it resumes (exit 75) and compose's `restart:
           on-failure` starts it again (podman honours it without systemd: measured)
redis-drop `pause` of the `redis` service's container for FOR (its data stays)
partition  `partition:NODE@AT[+FOR]`: network disconnect from the project's networks, then
           `heal`: reconnected with its address and DNS alias (partitions.py)
degrade    refused: a node changes its own links at emulated times of its scenario
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dualpath.deploy.containers.control import ControlError
from dualpath.model.faults.spec import Fault, FaultError, non_negative
from dualpath.model.faults.spec import parse as parse_process_fault
from dualpath.model.faults.timeline import Timeline

CONTAINER_KINDS = ("kill", "pause", "redis-drop", "partition")
REDIS_SERVICE = "redis"  # docker-compose.yml
_PARTITION = re.compile(
    r"^partition(?::(?P<target>[A-Za-z0-9_-]+))?@(?P<at>[^+]+)(?:\+(?P<for>.+))?$"
)
DEGRADE_REFUSED = (
    "degrade is not applied to containers: each node changes its own links at emulated "
    "times of its scenario; give it to the services (in docker-compose.yml's commands: "
    "--set 'faults.schedule=[\"{spec}\"]', times from the run's start) or use "
    "`dualpath up --fault {spec}`"
)


def parse(spec: str) -> Fault:
    """One container fault; `partition` here, every other kind by model/faults/spec.py."""
    text = spec.strip()
    kind = re.split(r"[:@]", text, maxsplit=1)[0]
    if kind == "degrade":
        raise FaultError(f"fault {spec!r}: " + DEGRADE_REFUSED.format(spec=text))
    if kind not in CONTAINER_KINDS:
        raise FaultError(
            f"fault {spec!r}: unknown kind {kind!r}; on containers one of "
            f"{', '.join(CONTAINER_KINDS)}"
        )
    if kind != "partition":
        return parse_process_fault(text)
    m = _PARTITION.match(text)
    if m is None or not m["target"]:
        raise FaultError(
            f"fault {spec!r}: expected partition:NODE@AT[+FOR], e.g. partition:prefill0@5+10"
        )
    at = non_negative(m["at"], "AT", spec)
    dur = non_negative(m["for"], "FOR", spec) if m["for"] is not None else 0.0
    return Fault("partition", m["target"], at, dur)


def parse_all(specs: Iterable[str]) -> list[Fault]:
    return sorted((parse(s) for s in specs), key=lambda f: f.at_s)


def service_of(f: Fault) -> str:
    return REDIS_SERVICE if f.kind == "redis-drop" else f.target


def check_services(faults: Iterable[Fault], services: Iterable[str]) -> None:
    names = sorted(services)
    for f in faults:
        if service_of(f) not in names:
            raise FaultError(
                f"fault {f}: no service {service_of(f)!r} in the compose project; its "
                f"services: {', '.join(names)}"
            )


class Actions(Protocol):
    """What a schedule does to a service (control.Cluster; a fake in the tests)."""

    def kill(self, service: str) -> str: ...
    def start(self, service: str) -> str: ...
    def pause(self, service: str) -> str: ...
    def unpause(self, service: str, watch_s: float = ...) -> str: ...
    def partition(self, service: str) -> str: ...
    def heal(self, service: str) -> str: ...


@dataclass
class ContainerFaults:
    faults: list[Fault]
    actions: Actions
    epoch: float  # clock() at emulated t = 0
    dilation: float
    clock: Callable[[], float] = time.monotonic
    log: list[dict[str, Any]] = field(default_factory=list)
    _begun: list[Fault] = field(default_factory=list)
    _timeline: Timeline = field(init=False)

    def __post_init__(self) -> None:
        self._timeline = Timeline(self.faults)

    def now(self) -> float:
        return (self.clock() - self.epoch) * self.dilation

    @property
    def pending(self) -> int:
        return len(self._timeline)

    @property
    def failed(self) -> int:
        return sum(1 for e in self.log if not e["ok"])

    def wait_s(self) -> float:
        """Wall seconds until the next start or end is due (0: due now, or nothing left)."""
        at = self._timeline.next_at()
        if at is None:
            return 0.0
        return max(0.0, (at - self.now()) / self.dilation)

    def step(self) -> list[dict[str, Any]]:
        """Apply every start or end whose emulated time has come; returns their events.
        A fault the engine refuses is recorded as not applied and the schedule goes on."""
        return [self._apply(f, start) for start, f in self._timeline.due(self.now())]

    def abort(self) -> list[dict[str, Any]]:
        """Interrupted: end now every begun fault that has an end (a paused node is not
        left frozen by Ctrl-C); the ones without an end stay, as scheduled."""
        ends = [f for start, f in self._timeline.drop_all() if not start and f in self._begun]
        return [self._apply(f, False) for f in ends]

    def _apply(self, f: Fault, start: bool) -> dict[str, Any]:
        now, wall = self.now(), time.time()
        try:
            detail, ok = (self._begin(f) if start else self._end(f)), True
        except ControlError as exc:
            detail, ok = f"not applied: {exc}", False
        if start and ok:
            self._begun.append(f)
        event = {
            "fault": str(f),
            "event": "applied" if start else "cleared",
            "t_s": round(now, 3),
            "wall": round(wall, 3),  # Unix s: to line up with what clients recorded
            "ok": ok,
            "detail": detail,
        }
        self.log.append(event)
        return event

    def _begin(self, f: Fault) -> str:
        s = service_of(f)
        if f.kind == "kill":
            return self.actions.kill(s)
        if f.kind == "partition":
            return self.actions.partition(s)
        return self.actions.pause(s)  # pause, redis-drop

    def _end(self, f: Fault) -> str:
        s = service_of(f)
        if f.kind == "kill":
            return self.actions.start(s)
        if f.kind == "partition":
            return self.actions.heal(s)
        # no watch: it would hold up the schedule; the engine restarts a fenced node
        return self.actions.unpause(s, watch_s=0)


def run(
    cf: ContainerFaults,
    sleep: Callable[[float], None] = time.sleep,
    on_event: Callable[[dict[str, Any]], None] = lambda e: None,
) -> list[dict[str, Any]]:
    """Apply the whole schedule (every start, and every end that has a time), then return
    its log. Ctrl-C ends the faults in force that have an end, then re-raises."""
    try:
        while cf.pending:
            sleep(cf.wait_s())
            for event in cf.step():
                on_event(event)
    except KeyboardInterrupt:
        for event in cf.abort():
            on_event(event)
        raise
    return cf.log
