"""RedisServer.start: a port picked for it but taken by someone else before redis-server
bound it is retried on a new port (a bounded number of times); any other failure is not."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from dualpath.runtimes.process.control import RedisServer, RedisUnavailable
from dualpath.runtimes.process.control import redis_server as redis_server_mod


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port with a listener on it, as if another process won the race for it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _ports(monkeypatch: pytest.MonkeyPatch, first: list[int]) -> list[int]:
    """Make `free_port` hand out `first` (in order), then real free ports; returns the
    list of every port it handed out."""
    handed: list[int] = []
    real = redis_server_mod.free_port

    def fake() -> int:
        handed.append(first.pop(0) if first else real())
        return handed[-1]

    monkeypatch.setattr(redis_server_mod, "free_port", fake)
    return handed


def test_a_port_taken_before_redis_binds_it_is_retried_on_a_new_port(
    monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    handed = _ports(monkeypatch, [taken_port])
    with RedisServer() as srv:
        assert handed[0] == taken_port and srv.port == handed[1] != taken_port
        assert redis_server_mod.ping(srv.port)
        assert "in use" in srv.log_path.read_text()  # the first try did fail on the port


def test_the_race_lost_every_time_gives_up_after_the_launch_attempts(
    monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    attempts = redis_server_mod._LAUNCH_ATTEMPTS
    handed = _ports(monkeypatch, [taken_port] * (attempts + 1))
    srv = RedisServer()
    with pytest.raises(RedisUnavailable, match=r"(?s)last lines of its log.*in use"):
        srv.start(timeout_s=5)
    assert handed == [taken_port] * attempts
    with pytest.raises(RuntimeError, match="no log"):
        srv.log_path  # noqa: B018 -- stop() removed its directory


def test_a_failure_other_than_the_port_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = _ports(monkeypatch, [])
    # `false` exits at once without a word: not a port problem, so no second launch
    with pytest.raises(RedisUnavailable, match="did not answer PING"):
        RedisServer(executable="false").start(timeout_s=5)
    assert len(handed) == 1
