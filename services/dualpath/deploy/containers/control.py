"""One compose project's containers, controlled through the Docker Engine API.

`docker.from_env()` honours DOCKER_HOST, so the same code drives a Docker engine and
podman's Docker-compatible service (scripts/containers/engine.sh). Containers are found by
compose's labels, not by name (compose names them PROJECT-SERVICE-N, but a `container_name:`
or another compose version may not). Every method returns one line saying what was done;
anything the caller can fix (no engine, no such project or service, the engine refusing an
action) is a `ControlError` with one line naming what to do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import docker
from docker import DockerClient
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.errors import APIError, DockerException
from docker.models.containers import Container

from dualpath.deploy.containers.partitions import (
    Endpoint,
    PartitionBook,
    default_state_dir,
    endpoints,
    reconnect,
)

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NUMBER_LABEL = "com.docker.compose.container-number"
ONEOFF_LABEL = "com.docker.compose.oneoff"
API_TIMEOUT_S = 30
POLL_S = 0.25
# After a fenced node exits (code 75), how long the engine's restart policy may take before
# this starts the container itself (podman restarted it 0.04 s after the exit here).
ENGINE_RESTART_GRACE_S = 3.0
STOP_TIMEOUT_S = 15  # docker-compose.yml: stop_grace_period of the services
ENGINE_HINT = 'start Docker, or podman\'s Docker API: eval "$(scripts/containers/engine.sh up)"'


class ControlError(Exception):
    """The command cannot go on; the message is one line naming what to do."""


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    service: str
    container: str
    state: str  # running, paused, exited, restarting, created, dead
    health: str  # healthy, starting, unhealthy; "-" without a healthcheck
    partitioned: bool  # running or paused, and on none of the project's networks
    restarts: int  # by the engine's restart policy
    exit_code: int | None  # when exited


def _reason(exc: BaseException) -> str:
    """An engine error in one line (they carry whole HTTP responses)."""
    said = exc.explanation if isinstance(exc, APIError) and exc.explanation else exc
    text = " ".join(str(said).split())
    return text if len(text) <= 200 else text[:197] + "..."


def engine_client(timeout_s: int = API_TIMEOUT_S) -> DockerClient:
    """A client of the engine at $DOCKER_HOST (or the Docker context), checked to answer.

    The API version comes from /_ping's `Api-Version` header instead of what `from_env()`
    does, a GET /version: podman 4.3 takes 0.5-0.8 s to answer that (a few ms for /_ping),
    and every command would pay it before doing anything."""
    where = os.environ.get("DOCKER_HOST") or "the default socket"
    try:
        probe = docker.from_env(version=MINIMUM_DOCKER_API_VERSION, timeout=timeout_s)
        try:  # (from_env with a version makes no request)
            answer = probe.api.get(probe.api.base_url + "/_ping", timeout=timeout_s)
        finally:
            probe.close()
        if not answer.ok:
            raise DockerException(f"/_ping answered HTTP {answer.status_code}")
        version = answer.headers.get("Api-Version") or None  # None: ask /version after all
        return docker.from_env(version=version, timeout=timeout_s)
    except (DockerException, OSError) as exc:
        raise ControlError(
            f"no container engine answers at {where} ({_reason(exc)}): {ENGINE_HINT}"
        ) from exc


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """The engine refusing an action (a paused container cannot be killed twice, ...) or
    going away mid-command: one line naming the action. OSError covers requests' errors."""
    try:
        yield
    except (DockerException, OSError) as exc:
        raise ControlError(f"{action}: {_reason(exc)}") from exc


class Cluster:
    """The containers of one compose project, by service name."""

    def __init__(
        self,
        client: DockerClient,
        project: str,
        book: PartitionBook | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.project = project
        self.book = book or PartitionBook(default_state_dir() / f"partitions-{project}.json")
        self.clock = clock
        self.sleep = sleep

    @classmethod
    def connect(cls, project: str) -> Cluster:
        cluster = cls(engine_client(), project)
        cluster.by_service()  # no such project: fail now, with the projects there are
        return cluster

    # ------------------------------------------------------------------ finding containers

    def by_service(self) -> dict[str, list[Container]]:
        """The project's containers (not `compose run` one-offs), by service, by number."""
        with engine_errors(f"list the containers of project {self.project!r}"):
            found = self.client.containers.list(
                all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"}
            )
        groups: dict[str, list[Container]] = {}
        for c in found:
            if c.labels.get(ONEOFF_LABEL, "False") == "True":
                continue
            groups.setdefault(c.labels.get(SERVICE_LABEL, "?"), []).append(c)
        if not groups:
            raise ControlError(self._no_project())
        for cs in groups.values():
            cs.sort(key=lambda c: int(c.labels.get(NUMBER_LABEL, "1") or 1))
        return dict(sorted(groups.items()))

    def _no_project(self) -> str:
        with engine_errors("list the compose projects"):
            labels = [c.labels for c in self.client.containers.list(all=True)]
        projects = sorted({lb[PROJECT_LABEL] for lb in labels if PROJECT_LABEL in lb})
        there = f"projects there: {', '.join(projects)}" if projects else "none is there"
        return (
            f"no container of compose project {self.project!r} ({there}): start it with "
            "`docker compose up -d`, or name another with --project"
        )

    def container(self, service: str) -> Container:
        """The service's container (its first replica: the cluster's nodes are one each)."""
        groups = self.by_service()
        if service not in groups:
            raise ControlError(
                f"no service {service!r} in compose project {self.project!r}; its services: "
                f"{', '.join(groups)}"
            )
        return groups[service][0]

    def project_networks(self) -> list[str]:
        with engine_errors(f"list the networks of project {self.project!r}"):
            nets = self.client.networks.list(filters={"label": f"{PROJECT_LABEL}={self.project}"})
        return sorted(n.name for n in nets if n.name)

    # ------------------------------------------------------------------ status

    def status(self) -> list[ServiceStatus]:
        nets = set(self.project_networks())
        rows = []
        for service, cs in self.by_service().items():
            for c in cs:
                state = c.attrs.get("State") or {}
                attached = set((c.attrs["NetworkSettings"].get("Networks") or {}).keys())
                live = c.status in ("running", "paused")
                rows.append(
                    ServiceStatus(
                        service=service,
                        container=c.name or _cid(c)[:12],
                        state=c.status,
                        health=(state.get("Health") or {}).get("Status") or "-",
                        partitioned=live and bool(nets) and not attached & nets,
                        restarts=int(c.attrs.get("RestartCount") or 0),
                        exit_code=None if live else state.get("ExitCode"),
                    )
                )
        return rows

    # ------------------------------------------------------------------ actions

    def kill(self, service: str) -> str:
        c = self.container(service)
        with engine_errors(f"kill {service}"):
            c.kill()
        # Docker and podman never restart a container killed through their API (moby sets
        # HasBeenManuallyStopped; podman: measured), whatever its restart policy says.
        return f"{service}: SIGKILL ({c.name}); it stays down until `dualpath cluster start`"

    def start(self, service: str) -> str:
        c = self.container(service)
        with engine_errors(f"start {service}"):
            c.start()
        return f"{service}: started ({c.name})"

    def restart(self, service: str, timeout_s: int = STOP_TIMEOUT_S) -> str:
        c = self.container(service)
        with engine_errors(f"restart {service}"):
            c.restart(timeout=timeout_s)
        return f"{service}: restarted ({c.name}; SIGTERM, SIGKILL after {timeout_s} s)"

    def pause(self, service: str) -> str:
        c = self.container(service)
        with engine_errors(f"pause {service}"):
            c.pause()
        return f"{service}: paused ({c.name}; its processes are frozen: a hung node)"

    def unpause(self, service: str, watch_s: float = 5.0) -> str:
        """Unpause, then watch for `watch_s` seconds: an engine node paused past its
        heartbeat lease fences itself (exit 75) as it resumes; the engine's restart policy
        should start it again, and if it does not within a grace period, this does."""
        c = self.container(service)
        with engine_errors(f"unpause {service}"):
            before = _run_marker(c)
            c.unpause()
            outcome = self._settle(c, before, watch_s) if watch_s > 0 else ""
        return f"{service}: unpaused ({c.name}){outcome}"

    def _settle(self, c: Container, before: tuple[int, str], watch_s: float) -> str:
        deadline = self.clock() + watch_s
        exited_at: float | None = None
        while self.clock() < deadline:
            self.sleep(POLL_S)
            c.reload()
            if _run_marker(c) != before:
                return "; it exited and the engine's restart policy started it again"
            if c.status not in ("exited", "dead"):
                continue
            exited_at = self.clock() if exited_at is None else exited_at
            if self.clock() - exited_at >= ENGINE_RESTART_GRACE_S:
                code = (c.attrs.get("State") or {}).get("ExitCode")
                c.start()
                return f"; it exited ({code}) and the engine did not restart it: started here"
        return f"; running after {watch_s:g} s" if c.status == "running" else f"; {c.status}"

    def partition(self, service: str) -> str:
        """Disconnect the container from every project network it is on."""
        c = self.container(service)
        with engine_errors(f"partition {service}"):
            eps = endpoints(c, self.project_networks())
            if not eps:
                return f"{service}: on none of the project's networks already (partitioned)"
            self.book.put(_cid(c), eps)  # first: the address must survive whatever follows
            for ep in eps:
                self.client.networks.get(ep.network).disconnect(c)
        where = ", ".join(f"{ep.network} ({ep.ipv4 or 'no IPv4'})" for ep in eps)
        return f"{service}: disconnected from {where}; peers cannot reach it, nor it them"

    def heal(self, service: str) -> str:
        """Reconnect a partitioned container with its address and its DNS aliases."""
        c = self.container(service)
        with engine_errors(f"heal {service}"):
            attached = set((c.attrs["NetworkSettings"].get("Networks") or {}).keys())
            recorded = [ep for ep in self.book.get(_cid(c)) if ep.network not in attached]
            if not recorded:
                # no record (another machine partitioned it, or the file is gone): the
                # project's networks, with the service name; the address will be new
                missing = [n for n in self.project_networks() if n not in attached]
                recorded = [Endpoint(n, "", "", (service,)) for n in missing]
            if not recorded:
                self.book.drop(_cid(c))
                return f"{service}: not partitioned (on {', '.join(sorted(attached)) or '-'})"
            kept = [reconnect(self.client.networks.get(ep.network), c, ep, service)
                    for ep in recorded]  # fmt: skip
            self.book.drop(_cid(c))
            where = ", ".join(f"{ep.network} as {service}" for ep in recorded)
            if all(kept):
                return f"{service}: reconnected to {where} ({recorded[0].ipv4 or 'its address'})"
            # a new address: the service still listens on its old one; a restart rebinds
            c.restart(timeout=STOP_TIMEOUT_S)
            return (
                f"{service}: reconnected to {where} with a new address (the old one was not "
                "recorded or could not be had) and restarted, so that it listens there"
            )


def _run_marker(c: Container) -> tuple[int, str]:
    """Changes when the engine restarts the container."""
    state = c.attrs.get("State") or {}
    return int(c.attrs.get("RestartCount") or 0), str(state.get("StartedAt") or "")


def _cid(c: Container) -> str:
    return c.id or ""  # (the stubs allow None: a model made from partial attributes)
