"""Network partitions of compose containers: disconnect, and reconnect as they were.

A compose service binds the address its DNS name had when it started (`--host prefill0`)
and peers reach it by that name. Reconnecting a container as Docker's and podman's API do by
default breaks both: the engine hands it a NEW address (its listening sockets stay on the
old one, so nobody reaches it) and, on podman 4.3, no service-name alias (peers' DNS lookups
fail: measured, docs/containers.md). So `partition` records where the container was on each
network (address and aliases) and `heal` reconnects it with them. `partition` and `heal` are
separate commands, possibly separate processes: the record lives in a small JSON file
(`PartitionBook`), written before the disconnect so that a crash cannot lose the address.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from docker.errors import APIError
from docker.models.containers import Container
from docker.models.networks import Network

STATE_ENV = "DUALPATH_STATE_DIR"


def default_state_dir() -> Path:
    """$DUALPATH_STATE_DIR, else $XDG_STATE_HOME/dualpath (~/.local/state/dualpath)."""
    if explicit := os.environ.get(STATE_ENV):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dualpath"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A container's place on one network."""

    network: str
    ipv4: str  # "" when the engine reported none
    ipv6: str
    aliases: tuple[str, ...]


def endpoints(container: Container, networks: Iterable[str]) -> list[Endpoint]:
    """The container's endpoints on the given networks (the project's), as the engine
    reports them. The aliases leave out the container's short id: the engine adds it
    itself on every connect."""
    wanted = set(networks)
    cid = container.id or ""
    attached: dict[str, Any] = container.attrs["NetworkSettings"].get("Networks") or {}
    found = []
    for name, ep in sorted(attached.items()):
        if name not in wanted:
            continue
        aliases = tuple(a for a in ep.get("Aliases") or () if not cid.startswith(a))
        found.append(
            Endpoint(name, ep.get("IPAddress") or "", ep.get("GlobalIPv6Address") or "", aliases)
        )
    return found


class PartitionBook:
    """Endpoints of partitioned containers, by container id, in one JSON file per project.
    A container recreated since has a new id: its stale record is never read."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        try:
            data: dict[str, list[dict[str, Any]]] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise OSError(f"cannot read the partition record {self.path}: {exc}") from exc
        return data

    def _save(self, data: dict[str, list[dict[str, Any]]]) -> None:
        if not data:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)  # a reader never sees half a file

    def get(self, container_id: str) -> list[Endpoint]:
        rows = self._load().get(container_id, [])
        return [Endpoint(r["network"], r["ipv4"], r["ipv6"], tuple(r["aliases"])) for r in rows]

    def put(self, container_id: str, eps: list[Endpoint]) -> None:
        data = self._load()
        data[container_id] = [asdict(e) for e in eps]
        self._save(data)

    def drop(self, container_id: str) -> None:
        data = self._load()
        if data.pop(container_id, None) is not None:
            self._save(data)


def reconnect(network: Network, container: Container, ep: Endpoint, service: str) -> bool:
    """Connect the container as it was: its address and aliases, the service name first.
    Returns False when the old address could not be had (taken meanwhile, or an engine
    that assigns addresses itself on a network without a user-configured subnet, as
    Docker does) and the container got another: it then listens where nobody connects,
    and the caller must restart it."""
    aliases = list(dict.fromkeys([service, *ep.aliases]))
    try:
        network.connect(
            container,
            ipv4_address=ep.ipv4 or None,
            ipv6_address=ep.ipv6 or None,
            aliases=aliases,
        )
        return True
    except APIError:
        if not (ep.ipv4 or ep.ipv6):
            raise
    network.connect(container, aliases=aliases)
    container.reload()
    now = container.attrs["NetworkSettings"]["Networks"].get(ep.network) or {}
    return bool(ep.ipv4) and now.get("IPAddress") == ep.ipv4
