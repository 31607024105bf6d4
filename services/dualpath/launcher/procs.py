"""Start, watch and stop the service processes of one local run (no orphans, ports freed).

Children run in their own sessions, so a terminal's Ctrl-C reaches only the launcher, which
then stops them in order with SIGTERM (graceful: health NOT_SERVING, deregister, drain) and
SIGKILLs whatever is still alive after the grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


class ClusterStartError(RuntimeError):
    """A service did not come up: the message names it and quotes its log."""


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in text[-lines:]) or "    (empty log)"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    args: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class ProcessGroup:
    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as fh:
            popen = subprocess.Popen(
                [sys.executable, "-m", "dualpath", *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        proc = Proc(name, popen, log, args)
        self.procs.append(proc)
        return proc

    def restart(self, name: str, grace_s: float = 10.0) -> Proc:
        """Stop one service gracefully and start it again with the same arguments."""
        old = next(p for p in self.procs if p.name == name)
        old.popen.send_signal(signal.SIGTERM)
        old.popen.wait(timeout=grace_s)
        self.procs.remove(old)
        return self.spawn(name, old.args)

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive:
                raise ClusterStartError(
                    f"service {p.name} exited with code {p.popen.returncode}; its log "
                    f"({p.log}):\n{log_tail(p.log)}"
                )

    def stop(self, grace_s: float = 10.0) -> list[str]:
        """SIGTERM everything (reverse start order), wait, SIGKILL stragglers. Returns the
        names that had to be killed."""
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
