"""Where sessions come from inside Locust (gevent side; imported by the locustfile only).

One `Loadgen` per Locust process. Its role follows the runner:
- the local runner or the distributed master DRIVES: it draws the arrivals (Poisson at APS,
  a closed loop of N, or the scripts' own start times) in one place, so the process is
  exactly Poisson whatever the number of workers, and hands out scripts in order, so no
  two workers replay the same session;
- the local runner or a worker EXECUTES: each arrival becomes one `AgentSession` user bound
  to its script, which replays it and stops for good (`StopUser`).
Master -> worker: `dualpath_session` (script index, session key, dilation); worker ->
master: `dualpath_done` (closed loop refills, completion) and `dualpath_abort` (fail-fast).

Locust's own dispatcher stays at 0 users (the locustfile's `SessionShape` ticks `(0, 1)`),
so it never respawns a finished session; the shape ends the test (tick -> None) when every
bounded session finished, on `--duration`, or on fail-fast.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import gevent  # type: ignore[import-untyped]
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from dualpath.loadgen.arrivals import poisson_times, run_schedule
from dualpath.loadgen.locust_report import detect_dilation, progress_record, slo_verdict
from dualpath.loadgen.options import LoadOptions, OptionError, Plan, make_plan, parse_options
from dualpath.loadgen.scripts import Workload, load_workload
from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario

log = logging.getLogger("dualpath.loadgen")

MSG_SESSION = "dualpath_session"
MSG_DONE = "dualpath_done"
MSG_ABORT = "dualpath_abort"
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class Assignment:
    """One session: which script, under which key, on which clock."""

    index: int  # into workload.scripts
    key: str  # the front door's session key (unique per test run)
    dilation: float  # emulated seconds per wall second of the cluster
    t0: float  # wall clock (time.time) of the arrival process's start
    origin_s: float  # the scripts' earliest start_s (trace times are relative to it)

    @classmethod
    def from_msg(cls, data: dict[str, Any]) -> Assignment:
        return cls(**data)


class Loadgen:
    current: ClassVar[Loadgen | None] = None

    def __init__(self, env: Environment, user_class: Any) -> None:
        self.env = env
        self.user_class = user_class
        self.opts = LoadOptions()
        self.plan: Plan | None = None
        self.sc: Scenario | None = None
        self.workload: Workload | None = None
        self._built_for: tuple[Any, ...] | None = None
        self.dilation = 1.0
        self.run_tag = ""
        self.t0 = 0.0
        self.broken: str | None = None  # set (or cleared) by each test_start
        self.reset()

    def reset(self) -> None:
        """A new test: counters to zero (the web UI can run many tests in one process)."""
        self.aborted: str | None = None
        self.started = self.done = self.failed = 0
        self.first_error: str | None = None
        self.wall_first = self.wall_last = 0.0
        self.inflight: dict[str, int] = {}
        self.last_verdict_seen: tuple[int, ...] | None = None
        self.tokens = {"prompt": 0, "cached": 0}  # of answered turns (a worker: unsent part)
        self._greenlets: list[gevent.Greenlet] = []
        self._running = False

    # --- wiring ----------------------------------------------------------------------
    def install(self) -> None:
        ev: Any = self.env.events  # Locust's EventHook methods are untyped
        ev.test_start.add_listener(self._on_test_start)
        ev.spawning_complete.add_listener(self._on_spawning_complete)
        ev.test_stopping.add_listener(self._on_test_stopping)
        ev.test_stop.add_listener(self._on_test_stop)
        ev.quit.add_listener(self._on_quit)
        ev.report_to_master.add_listener(self._on_report_to_master)
        ev.worker_report.add_listener(self._on_worker_report)
        runner = self.env.runner
        if isinstance(runner, MasterRunner):
            runner.register_message(MSG_DONE, self._msg_done)
            runner.register_message(MSG_ABORT, self._msg_abort)
        elif isinstance(runner, WorkerRunner):
            # concurrent: its handler may wait for the worker's own spawning (below)
            runner.register_message(MSG_SESSION, self._msg_session, concurrent=True)

    @property
    def drives(self) -> bool:
        return not isinstance(self.env.runner, WorkerRunner)

    def prepare(self) -> None:
        """Options -> scenario -> plan -> scripts (rebuilt only when their inputs change).
        Raises OptionError / ValueError (ConfigError) with a one-line message."""
        parsed = self.env.parsed_options
        opts = parse_options(vars(parsed) if parsed is not None else {})
        # Arriving sessions are online serving (paper §7.4): synthetic agents think between
        # turns (online.think_time_s); `--set workload.mode=...` still wins.
        online = {"workload": {"mode": "online"}} if opts.arrivals != "scripted" else {}
        sc = resolve(opts.preset, online, list(opts.sets))
        plan = make_plan(opts, sc)
        if plan.arrivals == "poisson" and not plan.aps > 0:
            raise OptionError("--aps must be > 0")
        key = (opts.preset, opts.sets, opts.arrivals == "scripted", plan.n_agents)
        if key != self._built_for:
            self.workload = load_workload(sc, plan.n_agents)
            self._built_for = key
            if not self.workload.scripts:
                raise OptionError(f"--preset {opts.preset}: the workload has no scripts")
        self.opts, self.sc, self.plan = opts, sc, plan

    def check(self) -> str | None:
        try:
            self.prepare()
        except ValueError as exc:  # OptionError and the settings' ConfigError
            return str(exc)
        return None

    # --- events ----------------------------------------------------------------------
    def _on_test_start(self, **_kw: Any) -> None:
        self.broken = self.check()
        if self.broken:
            log.error("load test not started: %s", self.broken)
            self.env.process_exit_code = 2
        elif self.drives:
            self.dilation = self.opts.speedup or detect_dilation(self.env.host)

    def _on_spawning_complete(self, **_kw: Any) -> None:
        if not self.drives or self.broken or self._running:
            return
        self._running = True
        self.run_tag = secrets.token_hex(3)
        self.t0 = time.time()
        self._greenlets = [gevent.spawn(self._arrive), gevent.spawn(self._progress_loop)]

    def _on_test_stopping(self, **_kw: Any) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []

    def _on_test_stop(self, **_kw: Any) -> None:
        if self.drives and self._running:
            self._running = False
            if self.opts.progress_file:
                progress_record(self, self.state())
            slo_verdict(self, final=False)

    def _on_quit(self, **_kw: Any) -> None:
        if self.drives and self.plan is not None:  # a master's last worker reports are in
            if self.opts.progress_file:
                progress_record(self, self.state())
            slo_verdict(self, final=True)

    def count_tokens(self, prompt: int, cached: int) -> None:
        """Prompt tokens of an answered turn and how many were read from the KV store."""
        self.tokens["prompt"] += prompt
        self.tokens["cached"] += cached

    def _on_report_to_master(self, data: dict[str, Any], **_kw: Any) -> None:
        data["dualpath_tokens"] = dict(self.tokens)  # sent with the worker's stats
        self.tokens = {"prompt": 0, "cached": 0}

    def _on_worker_report(self, data: dict[str, Any], **_kw: Any) -> None:
        for k, v in data.get("dualpath_tokens", {}).items():
            self.tokens[k] = self.tokens.get(k, 0) + int(v)

    # --- arrivals (driver) -----------------------------------------------------------
    def _arrive(self) -> None:
        assert self.plan is not None and self.workload is not None
        plan, scripts = self.plan, self.workload.scripts
        if plan.arrivals == "closed":
            for _ in range(plan.concurrency or len(scripts)):
                if not self.launch():
                    break
            return  # the rest: one new session per finished one (`session_done`)
        if plan.arrivals == "scripted":
            order = sorted(range(len(scripts)), key=lambda i: scripts[i].start_s)
            times = [(scripts[i].start_s - self.origin_s) / self.dilation for i in order]
            queue = iter(order)
            run_schedule(times, lambda: self.launch(next(queue)), gevent.sleep, time.monotonic)
            return
        rng = random.Random(plan.seed)
        gaps = (t / self.dilation for t in poisson_times(plan.aps, rng))
        run_schedule(gaps, self.launch, gevent.sleep, time.monotonic)

    @property
    def origin_s(self) -> float:
        assert self.workload is not None
        return min(s.start_s for s in self.workload.scripts)

    def bound(self) -> int | None:
        """Sessions this test starts in all (None: unbounded)."""
        assert self.plan is not None and self.workload is not None
        if self.plan.sessions:
            return self.plan.sessions
        return len(self.workload.scripts) if self.plan.arrivals == "scripted" else None

    def launch(self, index: int | None = None) -> bool:
        """Start the next session (False: none left to start)."""
        bound = self.bound()
        if self.aborted or (bound is not None and self.started >= bound):
            return False
        assert self.workload is not None
        n, k = len(self.workload.scripts), self.started
        idx = k % n if index is None else index
        script = self.workload.scripts[idx]
        # Fresh keys per test (a key's turn counter lives on in the front door); a reused
        # script gets a round suffix.
        key = f"{self.run_tag}-{script.key}" + (f"-r{k // n}" if k >= n else "")
        a = Assignment(idx, key, self.dilation, self.t0, self.origin_s)
        self.started += 1
        self.wall_first = self.wall_first or time.perf_counter()
        self._dispatch(a)
        return True

    def _dispatch(self, a: Assignment) -> None:
        runner = self.env.runner
        if not isinstance(runner, MasterRunner):
            self.start_session(a)
            return
        workers = [w for w in runner.clients.all if w.state != STATE_MISSING]
        if not workers:
            self.aborted = "no Locust worker is connected"
            return
        # Least sessions in flight: workers stay balanced as sessions end unevenly.
        target = min(workers, key=lambda w: self.inflight.get(w.id, 0))
        self.inflight[target.id] = self.inflight.get(target.id, 0) + 1
        runner.send_message(MSG_SESSION, asdict(a), client_id=target.id)

    def _msg_done(self, msg: Any, **_kw: Any) -> None:
        worker = msg.node_id
        self.inflight[worker] = max(0, self.inflight.get(worker, 0) - 1)
        self._finished_one(msg.data.get("error"))

    def _msg_abort(self, msg: Any, **_kw: Any) -> None:
        self.aborted = self.aborted or str(msg.data.get("error"))

    def _finished_one(self, error: str | None) -> None:
        self.done += 1
        self.wall_last = time.perf_counter()
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or error
        if self.plan is not None and self.plan.arrivals == "closed" and self._running:
            self.launch()

    def finished(self) -> bool:
        if self.broken or self.aborted:
            return True
        if self.plan is None or self.workload is None:
            return False
        bound = self.bound()
        return bound is not None and self.started >= bound and self.done >= self.started

    # --- sessions (executor) ---------------------------------------------------------
    def _msg_session(self, msg: Any, **_kw: Any) -> None:
        # The worker applies Locust's "spawn 0 users" job in a greenlet of its own, which
        # would stop a session started before it ran: let it finish first.
        spawning = getattr(self.env.runner, "spawning_greenlet", None)
        if spawning is not None:
            spawning.join()
        self.start_session(Assignment.from_msg(msg.data))

    def start_session(self, a: Assignment) -> None:
        if self.workload is None:
            self.broken = self.check()
        if self.broken:
            self.session_done(a, f"not started: {self.broken}")
            return
        user = self.user_class(self.env)
        user.assignment = a
        user.start(self.env.runner.user_greenlets)  # type: ignore[union-attr]

    def session_done(self, a: Assignment, error: str | None) -> None:
        """A session ended (None: every turn answered). Fail-fast aborts the test."""
        runner = self.env.runner
        abort = error is not None and self.opts.fail_fast
        if isinstance(runner, WorkerRunner):
            if abort:  # first, so a closed loop refilling on "done" starts nothing more
                runner.send_message(MSG_ABORT, {"error": error})
            runner.send_message(MSG_DONE, {"key": a.key, "error": error})
            return
        if abort:
            self.aborted = self.aborted or error
        self._finished_one(error)

    # --- reporting -------------------------------------------------------------------
    def state(self) -> str:
        """complete: every bounded session finished; aborted: fail-fast or bad options;
        stopped: ended early (duration, the UI's stop button, Ctrl-C); else running."""
        if self.broken or self.aborted:
            return "aborted"
        if self.finished():
            return "complete"
        return "running" if self._running else "stopped"

    def _progress_loop(self) -> None:
        while True:
            if self.opts.progress_file:
                progress_record(self, self.state())
            gevent.sleep(PROGRESS_EVERY_S)
