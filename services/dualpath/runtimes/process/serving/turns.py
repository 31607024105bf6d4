"""The scheduler process's front-door backend (`frontdoor/backend.py`'s protocols): admit or
refuse a turn, wait for its end with a deadline, and take back a turn whose client hung up.
A mixin of `SchedulerShell` (serving/scheduler.py), which owns the state named below."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import grpc

from dualpath.logs import event
from dualpath.model.core.clock import RealClock
from dualpath.model.engines.capacity import CapacityError
from dualpath.model.entities.request import Request
from dualpath.runtimes.process.frontdoor import (
    BackendBusy,
    BackendUnavailable,
    BadTurn,
    TurnResult,
    TurnSpec,
)
from dualpath.runtimes.process.serving.admission import Admission
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.pacer import TokenPacer
from dualpath.runtimes.process.serving.remote_scheduler import RemoteScheduler

log = logging.getLogger(__name__)


class TurnsBackend:
    """`run_turn` and `cancel_turn` over the shell's scheduler and admission control."""

    # The shell's state (set by SchedulerShell and ServiceShell)
    sched: RemoteScheduler
    opts: ServeOptions
    clock: RealClock
    admission: Admission
    fatal: asyncio.Future[None]
    ready: bool
    lost: set[str]
    cancelled: int
    _rids: Iterator[int]
    _turns: dict[int, Request]  # id(spec) -> its request, while it runs

    def _admit(self, spec: TurnSpec) -> Request:
        """Refuse (503, 429, 400) or queue a new turn."""
        if self.fatal.done():
            raise BackendUnavailable(f"the run failed: {self.fatal.exception()}")
        if not self.ready:
            raise BackendUnavailable("the cluster is not serving yet (starting) or any more")
        if len(self.sched.inflight) >= self.opts.max_inflight:
            raise BackendBusy(f"{len(self.sched.inflight)} turns in flight; retry later")
        refusal = self.admission.refusal()
        if refusal is not None:
            raise BackendBusy(refusal)
        try:
            self.sched.ctx.chains.declare_all(spec.lineage)  # a prefix shared by content
        except ValueError as exc:
            raise BadTurn(f"inconsistent prefix lineage: {exc}") from None
        req = Request(
            rid=next(self._rids),
            session=spec.session,
            turn=spec.turn,
            prompt=spec.prompt_tokens,
            gen=spec.gen_tokens,
            arrival=self._arrival(spec),
            done=asyncio.get_running_loop().create_future(),
        )
        try:
            self.sched.submit(req)
        except CapacityError as exc:
            raise BadTurn(str(exc)) from None
        self.admission.admitted(req.rid)
        self._turns[id(spec)] = req
        return req

    def _arrival(self, spec: TurnSpec) -> float:
        """When the front door received the request (docs/frontdoor.md), else now."""
        now = self.clock.now()
        return now if spec.received is None else min(now, self.clock.at_wall(spec.received))

    async def run_turn(
        self,
        spec: TurnSpec,
        first_token: Callable[[], None] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
    ) -> TurnResult:
        try:
            req = self._admit(spec)
        except (BackendBusy, BackendUnavailable, BadTurn) as exc:
            # a full queue is expected back-pressure; the others say something is wrong
            level = logging.INFO if isinstance(exc, BackendBusy) else logging.WARNING
            event(log, "turn_refused", level, exc=exc, session=spec.session, turn=spec.turn)
            raise
        event(
            log,
            "turn_accepted",
            request_id=req.rid,
            session=req.session,
            turn=req.turn,
            prompt_tokens=req.prompt,
            gen_tokens=req.gen,
        )
        waiting = True

        def prefilled() -> None:  # the prefill ended: its work leaves the admission queue
            nonlocal waiting
            if waiting:
                waiting = False
                self.admission.prefilled(req.rid)
            pacer = self.sched.pacers.get(req.rid)
            if pacer is not None:
                pacer.started(req.t_first)
            event(log, "first_token", request_id=req.rid, ttft_s=req.t_first - req.arrival)
            if first_token is not None:
                first_token()

        self.sched.first_token[req.rid] = prefilled
        if on_tokens is not None:  # a stream: its decode tokens at their emulated times
            self.sched.pacers[req.rid] = TokenPacer(self.clock, on_tokens)
        try:
            # a turn whose node died never reports: it fails at its deadline, not never
            assert req.done is not None  # made with the request above
            await asyncio.wait_for(asyncio.shield(req.done), self.opts.transfer_deadline())
        except TimeoutError:
            why = (
                f"turn {req.rid} did not finish within {self.opts.transfer_deadline():.0f} s "
                f"(lost nodes: {sorted(self.lost) or 'none'})"
            )
            self.sched.fail_request(req, BackendUnavailable(why))  # frees what it held
            _failed(req, why)
            raise BackendUnavailable(why) from None
        except (BackendBusy, BackendUnavailable, BadTurn) as exc:
            _failed(req, str(exc))
            raise
        except Exception as exc:  # this turn's remote work failed: say so, explicitly
            _failed(req, _describe(exc))
            raise BackendUnavailable(f"turn {req.rid} failed: {_describe(exc)}") from None
        finally:
            self._turns.pop(id(spec), None)
            self.sched.forget_pacer(req.rid)
            if waiting:  # failed before its prefill ended
                waiting = False
                self.admission.prefilled(req.rid)
        return TurnResult(
            request_id=req.rid,
            session=req.session,
            turn=req.turn,
            prompt_tokens=req.prompt,
            cached_tokens=req.hit,
            generated_tokens=req.gen,
            read_path=req.path.value,
            arrival_s=req.arrival,
            first_token_s=req.t_first,
            second_token_s=req.t_second,
            last_token_s=req.t_last,
            scheduled_s=req.t_sched if req.t_sched >= 0 else None,
            engine=req.de.engine_id if req.de is not None else "",
        )

    async def cancel_turn(self, spec: TurnSpec) -> None:
        """The client hung up. A turn still waiting for its PE or its DE leaves the queue and
        gives back the PE's tok_e/seq_e; a turn whose KV read has started runs to its end,
        so its reads and persists stay exactly accounted (the work is on the links)."""
        req = self._turns.get(id(spec))
        if req is None or req.de is not None or req.done is None or req.done.done():
            return
        if self.sched.cancel_queued(req):
            self.cancelled += 1
            event(log, "turn_cancelled", request_id=req.rid, why="the client hung up")


def _failed(req: Request, why: str) -> None:
    event(
        log,
        "turn_failed",
        logging.WARNING,
        request_id=req.rid,
        session=req.session,
        turn=req.turn,
        attempt=req.attempt,
        error=why,
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} from a peer ({exc.details()})"
    return f"{type(exc).__name__}: {exc}"
