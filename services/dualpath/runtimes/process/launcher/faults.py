"""The fault schedule on the process runtime: signals to the services and to Redis at the
schedule's emulated times (wall = emulated ÷ dilation from the run's epoch).

kill  SIGKILL; the launcher holds the service down (its supervisor does not restart it)
      until the fault ends, then starts it again; without a duration it stays down.
pause SIGSTOP, then SIGCONT: a hung process. An engine node stopped past its heartbeat
      lease fences itself when resumed (runtimes/process/serving/fence.py) and its supervisor
      restarts it.
redis-drop SIGSTOP/SIGCONT of the run's own redis-server: every client times out, nothing
      is lost (the history the checker reads survives).
degrade is not applied here: every node applies it to its own links on its clock
(model/engines/faults.py), at the exact emulated time.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dualpath.model.faults.spec import Fault
from dualpath.model.faults.timeline import Timeline
from dualpath.runtimes.process.launcher.procs import ProcessGroup

log = logging.getLogger(__name__)


@dataclass
class LiveFaults:
    faults: list[Fault]
    group: ProcessGroup
    redis_pid: Callable[[], int | None]
    epoch: float  # perf_counter() at emulated t = 0
    dilation: float
    log: list[dict[str, Any]] = field(default_factory=list)
    _timeline: Timeline = field(init=False)

    def __post_init__(self) -> None:
        self._timeline = Timeline(self.faults)

    def now(self) -> float:
        return (time.perf_counter() - self.epoch) * self.dilation

    @property
    def pending(self) -> int:
        return len(self._timeline)

    def step(self) -> None:
        """Apply every fault start or end whose emulated time has come."""
        now = self.now()
        for start, f in self._timeline.due(now):
            try:
                detail = self._begin(f) if start else self._end(f)
            except (ProcessLookupError, StopIteration) as exc:
                detail = f"not applied: {exc!r}"
            event = "applied" if start else "cleared"
            self.log.append({"fault": str(f), "event": event, "t_s": now, "detail": detail})
            log.warning("fault: %s %s at t=%.2f s (%s)", event, f, now, detail)

    def _pid(self, f: Fault) -> int:
        if f.kind == "redis-drop":
            pid = self.redis_pid()
            if pid is None:
                raise ProcessLookupError("the run uses an external Redis: not signalled")
            return pid
        return next(p for p in self.group.procs if p.name == f.target).popen.pid

    def _begin(self, f: Fault) -> str:
        if f.kind == "degrade":
            return "applied by the node to its own links"
        pid = self._pid(f)
        if f.kind == "kill":
            self.group.hold(f.target)
            os.kill(pid, signal.SIGKILL)
            return f"SIGKILL pid {pid}"
        os.kill(pid, signal.SIGSTOP)
        return f"SIGSTOP pid {pid}"

    def _end(self, f: Fault) -> str:
        if f.kind == "degrade":
            return "cleared by the node"
        if f.kind == "kill":
            new = self.group.respawn(f.target)
            return f"started again as pid {new.popen.pid}"
        pid = self._pid(f)
        os.kill(pid, signal.SIGCONT)
        return f"SIGCONT pid {pid}"
