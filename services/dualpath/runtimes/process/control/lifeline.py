"""Children die with the launcher that started them, even when it is SIGKILLed.

A SIGKILLed launcher runs no cleanup, so its children must notice by themselves. On Linux a
child asks the kernel for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`), then
checks that its parent is still the launcher (it may have died before the request). The
kernel sends that signal when the *thread* that forked the child exits, not the process, so
launchers fork from their main thread. As a fallback (other systems, or a signal lost in a
race) a service also polls its parent pid (`watch_parent`).

Python children (`dualpath serve`) do this at startup, told the launcher's pid through
`PARENT_ENV`; other programs (redis-server) are started through `guarded_argv`, a tiny
Python shim that does it and then execs the program in the same process (same pid).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable

PARENT_ENV = "DUALPATH_PARENT_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_log = logging.getLogger(__name__)

# The shim runs with `python -I -S -c` (no site, no user paths: starts in ~20 ms).
# argv: -c PARENT_PID PROGRAM ARGS...; exits 0 without starting PROGRAM if the parent is gone.
_SHIM = """\
import ctypes, os, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGTERM
if os.getppid() != parent:
    sys.exit(0)
os.execv(sys.argv[2], sys.argv[2:])
"""


def guarded_argv(argv: list[str], parent_pid: int | None = None) -> list[str]:
    """`argv` wrapped so that the program gets SIGTERM when `parent_pid` (default: this
    process) dies. The program must be given as a path (execv does not search PATH)."""
    parent = os.getpid() if parent_pid is None else parent_pid
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(parent), *argv]


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask for `sig` when this process's parent (thread) dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def expected_parent() -> int | None:
    """The launcher's pid if a launcher started this process (`PARENT_ENV`), else None."""
    raw = os.environ.get(PARENT_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 1 else None


def arm(parent: int | None) -> bool:
    """Tie this process's life to `parent`: True if the parent is still alive."""
    if parent is None:
        return True
    set_parent_death_signal()
    return os.getppid() == parent


async def watch_parent(parent: int, on_lost: Callable[[], None], period_s: float = 0.5) -> None:
    """Call `on_lost` once the parent is gone (this process was re-parented), then return."""
    while os.getppid() == parent:
        await asyncio.sleep(period_s)
    _log.warning("lifeline: parent exited parent_pid=%d action=shutdown", parent)
    on_lost()
