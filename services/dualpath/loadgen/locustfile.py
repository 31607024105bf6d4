"""Locust load generator for the DualPath testbed: online agent sessions against the HTTP
front door (docs/loadgen.md).

    locust -f loadgen/locustfile.py --host http://127.0.0.1:8000          # web UI on :8089
    locust -f loadgen/locustfile.py --host http://127.0.0.1:8000 --headless \\
        --aps 0.5 --duration 120 --csv out/locust --html out/locust.html
    locust -f loadgen/locustfile.py --host ... --processes 4               # master + 4 workers

One user = one agent session; sessions arrive as a Poisson process at `--aps` (or a closed
loop of `--concurrency`, or at the scripts' start times), not at Locust's spawn rate, so
`-u`/`-r` do not apply. Emulated TTFT/TTST/TPOT/turn latency appear as "EMU" rows.

Imports stay free of the asyncio services (aiohttp, grpc, redis, uvloop): Locust's gevent
monkey-patching must come first in this process, and only pure code is shared.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from locust import LoadTestShape, events
from locust.env import Environment

from dualpath.loadgen.locust_driver import Loadgen
from dualpath.loadgen.locust_user import AgentSession
from dualpath.loadgen.options import SPECS, Spec

__all__ = ["AgentSession", "SessionShape"]

log = logging.getLogger("dualpath.loadgen")


class SessionShape(LoadTestShape):
    """Keeps Locust's own dispatcher at 0 users (sessions are started by `Loadgen`) and
    ends the test when the load generator is done or `--duration` is over."""

    use_common_options = False

    def reset_time(self) -> None:
        super().reset_time()  # type: ignore[no-untyped-call]
        if Loadgen.current is not None and Loadgen.current.drives:
            Loadgen.current.reset()

    def tick(self) -> tuple[int, float] | None:
        lg = Loadgen.current
        if lg is None:
            return (0, 1.0)
        # `-t/--run-time` too: with a shape Locust itself only starts that timer after the
        # shape has ended, so the shape has to honour it
        run_time = getattr(lg.env.parsed_options, "run_time", None) or 0
        duration = lg.opts.duration_s or float(run_time)
        over = duration > 0 and self.get_run_time() >= duration  # type: ignore[no-untyped-call]
        return None if over or lg.finished() else (0, 1.0)


class _JoinSets(argparse.Action):
    """`--set a=1 --set b=2` -> "a=1,b=2": one string, as the web UI form edits it."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        old = getattr(namespace, self.dest, "") or ""
        setattr(namespace, self.dest, f"{old},{values}" if old else str(values))


def _argument(spec: Spec) -> dict[str, Any]:
    kw: dict[str, Any] = {"default": spec.default, "help": spec.help}
    kw["include_in_web_ui"] = spec.ui
    if spec.choices:
        kw["choices"] = list(spec.choices)
    if isinstance(spec.default, bool):
        kw["action"] = "store_true"
    elif spec.dest == "set":
        kw["action"] = _JoinSets
    elif isinstance(spec.default, int | float):
        kw["type"] = type(spec.default)
    return kw


def _add_options(parser: Any, **_kw: Any) -> None:
    for spec in SPECS:
        parser.add_argument(spec.flag, **_argument(spec))


def _init(environment: Environment, **_kw: Any) -> None:
    lg = Loadgen(environment, AgentSession)
    Loadgen.current = lg
    lg.install()
    error = lg.check()  # bad options end the process now, before any UI or worker waits
    if error is not None:
        log.error("dualpath load generator: %s", error)
        sys.exit(2)


hooks: Any = events  # Locust's EventHook methods are untyped
hooks.init_command_line_parser.add_listener(_add_options)
hooks.init.add_listener(_init)
