"""Start, watch, restart and stop the service processes of one local run (no orphans).

Children run in their own sessions, so a terminal's Ctrl-C reaches only the launcher, which
then stops them in order with SIGTERM (graceful: health NOT_SERVING, deregister, drain) and
SIGKILLs whatever is still alive after the grace period. A launcher that is SIGKILLed gets no
say: each child asks the kernel for SIGTERM when the launcher's forking thread dies and polls
the launcher's pid (runtimes/process/control/lifeline.py), so spawn from the main thread.

Once `supervise()` is armed, `check_alive()` restarts a service that exited, per its
`RestartPolicy` (with backoff and a limit per window), instead of failing the run.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from dualpath.runtimes.process.control.lifeline import PARENT_ENV

log = logging.getLogger(__name__)


class ClusterStartError(RuntimeError):
    """A service did not come up (or kept crashing): the message names it and quotes its log."""


class Restart(enum.StrEnum):
    NEVER = "never"  # any exit fails the run (the behaviour tests of failure paths want)
    ON_FAILURE = "on-failure"  # restart after a non-zero exit or a signal
    ALWAYS = "always"  # restart after any exit the launcher did not ask for


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """`max_restarts` per service within `window_s`; beyond, the run fails as with `never`.
    The n-th restart within the window waits `min(backoff_cap_s, backoff_s * 2**(n-1))`."""

    mode: Restart = Restart.ON_FAILURE
    max_restarts: int = 5
    window_s: float = 60.0
    backoff_s: float = 0.25
    backoff_cap_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or not self.window_s > 0:
            raise ValueError("restart policy: max_restarts must be >= 0 and window_s > 0")
        if not 0 <= self.backoff_s <= self.backoff_cap_s:
            raise ValueError("restart policy: need 0 <= backoff_s <= backoff_cap_s")

    def restarts(self, code: int) -> bool:
        """Does an exit with `code` (negative: killed by that signal) call for a restart?"""
        return self.mode is Restart.ALWAYS or (self.mode is Restart.ON_FAILURE and code != 0)

    def delay(self, recent: int) -> float:
        """Backoff before the next restart, given `recent` restarts within the window."""
        return min(self.backoff_cap_s, self.backoff_s * 2 ** max(0, recent - 1)) if recent else 0


@dataclass(frozen=True, slots=True)
class RestartRecord:
    name: str
    exit_code: int
    detected_at: float  # monotonic
    restarted_at: float  # monotonic
    old_pid: int
    new_pid: int


# A service's last words (`dualpath serve` logs `service_failed`, dualpath/cli/serve.py), in
# the text format: `... service_failed error="..." exit_code=1`, the value JSON-quoted.
_FAILED = re.compile(r'service_failed error=("(?:[^"\\]|\\.)*")')


def log_tail(path: Path, lines: int = 15, start: int = 0) -> str:
    """The last `lines` lines of a log from byte `start` on (this run's part of the file)."""
    text = _read_from(path, start)
    if text is None:
        return "(no log)"
    return "\n".join("    " + ln for ln in text[-lines:]) or "    (empty log)"


def failure_reason(path: Path, start: int = 0) -> str | None:
    """The error a service logged as `service_failed` (text or JSON lines), if it did."""
    for line in reversed(_read_from(path, start) or []):
        if "service_failed" not in line:
            continue
        if line.lstrip().startswith("{"):
            try:
                error = json.loads(line).get("error")
            except (ValueError, AttributeError):
                continue
            return str(error) if error else None
        found = _FAILED.search(line)
        if found:
            try:
                return str(json.loads(found.group(1)))
            except ValueError:
                return found.group(1)
    return None


def _read_from(path: Path, start: int) -> list[str] | None:
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            return fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return None


def _exited(p: Proc, code: int, more: str = "") -> str:
    """`service NAME exited with code N[: its error]`, then this run's log tail."""
    reason = failure_reason(p.log, p.log_start)
    head = f"service {p.name} exited with code {code}{more}" + (f": {reason}" if reason else "")
    return f"{head}. Its log ({p.log}):\n{log_tail(p.log, start=p.log_start)}"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = field(default=None, repr=False)  # may hold the token
    log_start: int = 0  # the log's size when this process started: its lines follow
    exited_at: float | None = None  # monotonic, when the supervisor first saw it dead

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class ProcessGroup:
    log_dir: Path
    procs: list[Proc] = field(default_factory=list)
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    restarts: list[RestartRecord] = field(default_factory=list)
    supervising: bool = False  # restarts armed (after startup; off again while stopping)
    held: set[str] = field(default_factory=set)  # down on purpose (a kill fault): not restarted
    _recent: dict[str, deque[float]] = field(default_factory=dict)

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        if threading.current_thread() is not threading.main_thread():
            # the children's parent-death signal fires when *this thread* exits
            log.warning("launcher: spawn outside the main thread service=%s", name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as fh:
            start = fh.tell()  # (logs are appended to: earlier runs' lines stay above)
            popen = subprocess.Popen(
                [sys.executable, "-m", "dualpath", *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {}), PARENT_ENV: str(os.getpid())},
            )
        proc = Proc(name, popen, log_path, args, env, log_start=start)
        self.procs.append(proc)
        return proc

    def restart(self, name: str, grace_s: float = 10.0) -> Proc:
        """Stop one service gracefully and start it again with the same arguments."""
        old = next(p for p in self.procs if p.name == name)
        old.popen.send_signal(signal.SIGTERM)
        old.popen.wait(timeout=grace_s)
        return self._replace(old)

    def hold(self, name: str) -> None:
        """Keep `name` down when it exits (a fault kills it on purpose)."""
        self.held.add(name)

    def respawn(self, name: str) -> Proc:
        """Start a held service again (the end of its kill fault)."""
        self.held.discard(name)
        old = next(p for p in self.procs if p.name == name)
        if old.alive:
            return old
        return self._replace(old)

    def _replace(self, old: Proc) -> Proc:
        at = self.procs.index(old)  # keep the start order: stop() goes in reverse
        self.procs.remove(old)
        new = self.spawn(old.name, old.args, old.env)
        self.procs.remove(new)
        self.procs.insert(at, new)
        return new

    def supervise(self, policy: RestartPolicy | None = None) -> None:
        """Arm restarts (call once every service is up: a crash at startup is a bug to see,
        not to retry)."""
        if policy is not None:
            self.policy = policy
        self.supervising = True

    def check_alive(self) -> None:
        """Raise ClusterStartError for a service that exited and is not to be restarted;
        restart (when its backoff is over) one that is. Call it often from the thread that
        started the group: `dualpath up` calls it every 0.2 s."""
        now = time.monotonic()
        for p in list(self.procs):
            if p.alive or p.name in self.held:
                continue
            code = int(p.popen.returncode)
            if not (self.supervising and self.policy.restarts(code)):
                raise ClusterStartError(_exited(p, code))
            if p.exited_at is None:
                p.exited_at = now
            recent = self._recent.setdefault(p.name, deque())
            while recent and now - recent[0] > self.policy.window_s:
                recent.popleft()
            if len(recent) >= self.policy.max_restarts:
                raise ClusterStartError(
                    _exited(
                        p,
                        code,
                        f" after {len(recent)} restarts within {self.policy.window_s:g} s; "
                        "giving up",
                    )
                )
            delay = self.policy.delay(len(recent))
            if now - p.exited_at >= delay:
                self._restart_crashed(p, code, delay, recent)

    def _restart_crashed(self, p: Proc, code: int, delay: float, recent: deque[float]) -> None:
        new = self._replace(p)
        now = time.monotonic()
        recent.append(now)
        assert p.exited_at is not None
        self.restarts.append(
            RestartRecord(p.name, code, p.exited_at, now, p.popen.pid, new.popen.pid)
        )
        log.warning(
            "launcher: restarted service=%s exit_code=%d old_pid=%d new_pid=%d "
            "restarts_in_window=%d/%d backoff_s=%.2f",
            p.name,
            code,
            p.popen.pid,
            new.popen.pid,
            len(recent),
            self.policy.max_restarts,
            delay,
        )

    def stop(self, grace_s: float = 10.0) -> list[str]:
        """SIGTERM everything (reverse start order), wait, SIGKILL stragglers. Returns the
        names that had to be killed."""
        self.supervising = False
        for p in reversed(self.procs):
            if p.alive:
                p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        killed: list[str] = []
        for p in self.procs:
            left = max(0.0, deadline - time.monotonic())
            try:
                p.popen.wait(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()
                killed.append(p.name)
        return killed
