"""Running Locust as a subprocess (what `dualpath load` and `dualpath run` do).

Locust monkey-patches the standard library when imported and must be the first import of
its process, so the asyncio side never imports it: it starts `python -m locust -f
<locustfile>` and talks to it through files (CSV, HTML, the progress record, the SLO JSON).

The locustfile is the package module `dualpath.loadgen.locustfile` (a .py file inside the
package, so it ships with every install); the repository's `loadgen/locustfile.py` only
re-exports it for `locust -f loadgen/locustfile.py`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dualpath.loadgen.options import to_argv

LOCUSTFILE_MODULE = "dualpath.loadgen.locustfile"


def locustfile_path() -> Path:
    """Where the locustfile is, found without importing it (that would import Locust)."""
    spec = importlib.util.find_spec(LOCUSTFILE_MODULE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"{LOCUSTFILE_MODULE} is not installed")
    return Path(spec.origin)


@dataclass(frozen=True, slots=True)
class LocustRun:
    """One Locust invocation: Locust's own flags plus the locustfile's options (by dest)."""

    host: str
    options: dict[str, Any] = field(default_factory=dict)
    headless: bool = True
    web_host: str = "127.0.0.1"
    web_port: int = 8089
    processes: int = 0  # 0: one process; N: a master and N workers (`--processes N`)
    csv_prefix: Path | None = None
    html: Path | None = None
    loglevel: str = "INFO"

    def argv(self) -> list[str]:
        cmd = [sys.executable, "-m", "locust", "-f", str(locustfile_path()), "--host", self.host]
        if self.headless:
            cmd.append("--headless")
        else:
            cmd += ["--web-host", self.web_host, "--web-port", str(self.web_port)]
        if self.processes:
            cmd += ["--processes", str(self.processes)]
        if self.csv_prefix is not None:
            cmd += ["--csv", str(self.csv_prefix)]
        if self.html is not None:
            cmd += ["--html", str(self.html)]
        cmd += ["--loglevel", self.loglevel, *to_argv(self.options)]
        return cmd


class LocustProcess:
    """A running Locust (in its own session: a terminal's Ctrl-C reaches only us, and we
    stop it in order: SIGINT = Locust's own clean shutdown that writes the reports)."""

    def __init__(self, run: LocustRun, log: Path | None = None) -> None:
        self.argv = run.argv()
        self.log = log
        out: IO[bytes] | None = None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = log.open("ab")
        try:
            with _sigint_inheritable():
                self.popen = subprocess.Popen(
                    self.argv,
                    stdout=out,
                    stderr=subprocess.STDOUT if out is not None else None,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
        finally:
            if out is not None:
                out.close()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 20.0) -> int:
        """SIGINT, then SIGTERM to its process group, then SIGKILL; returns the exit code."""
        if self.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            if self.wait(grace_s) is None:
                self._signal_group(signal.SIGTERM)
                if self.wait(5.0) is None:
                    # The group: workers of `--processes` must not outlive their master.
                    self._signal_group(signal.SIGKILL)
                    self.popen.wait()
        return self.popen.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def __enter__(self) -> LocustProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _sigint_inheritable() -> Iterator[None]:
    """A launcher started in the background (`cmd &`, some CI) ignores SIGINT, and an
    ignored signal stays ignored across exec; Locust needs SIGINT to shut down cleanly (and
    write its HTML report). A handler, unlike SIG_IGN, resets to the default on exec."""
    try:
        ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        if ignored:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: leave the disposition alone
        ignored = False
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON record another process rewrites atomically; None if absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
