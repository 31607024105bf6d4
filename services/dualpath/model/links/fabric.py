"""The emulated network/memory fabric: a fluid (flow-level) model of shared links.

Flows cross one or more links at once; each link splits its rate among its flows
(processor sharing, or IB VL arbitration on CNICs) and a flow moves at the minimum of its
shares. Shares are recomputed only on the links a start/finish touches, and unused share is
handed on through a bounded cascade (see `_relax` and docs/links.md). Time comes only from the
`Clock` seam, so the same fabric runs on the virtual loop and on the dilated real clock.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Final

from dualpath.model.core.clock import Clock, TimerHandle
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.links.arbitration import VlArbitration
from dualpath.model.links.link import ACTIVE, CANCELLED, DONE, Flow, Link
from dualpath.model.links.schedule import new_queue, tolerance
from dualpath.model.links.sharing import Sharer

INF: Final = math.inf


class Fabric:
    """Links plus the flows crossing them. `bucket_s` is the width of every link's series."""

    def __init__(self, clock: Clock, bucket_s: float | None = 1.0, max_cascade: int = 64) -> None:
        if max_cascade < 0:
            raise ValueError(f"max_cascade must be >= 0, got {max_cascade}")
        self._clock = clock
        # The same clock, typed, when it is the virtual core: its `now` and `call_at` are then
        # native calls in a compiled build, where a call through the `Clock` protocol is not.
        self._core: VirtualCore | None = clock if isinstance(clock, VirtualCore) else None
        self._bucket_s = bucket_s
        self.links: dict[str, Link] = {}
        self._due = new_queue()
        self._sharer = Sharer(max_cascade)
        self._t = clock.now()
        self._advancing = False
        self._timer: TimerHandle | None = None
        self._alarm = False  # the timer is the virtual core's alarm (`set_alarm`) instead
        core = self._core
        self._alarm_core = core if core is not None and core.claim_alarm(self) else None
        self._timer_t = INF  # when the timer or the alarm is due (INF: neither is set)
        # Starts and cancels of one instant re-share once, at its end (`_defer`, `flush`).
        self._pending = False
        self._pending_t = 0.0
        self._flush_timer: TimerHandle | None = None
        self.relaxes = 0  # re-shares run (cost diagnostics for the bench)
        # Closed form for a start on idle links (off: the general cascade, for tests).
        self.idle_shortcut = True
        self.flows_started = 0
        self.active_flows = 0
        self.flows_completed = 0
        self.flows_cancelled = 0
        # The two timer callbacks as bound methods made once: reading `self._on_timer` as a
        # value builds a new bound method through a generic attribute lookup each time,
        # in a compiled build as in Python, and the fabric arms a timer on every re-share.
        self._on_timer_cb: Callable[[], None] = self._on_timer
        self._on_flush_cb: Callable[[], None] = self._on_flush

    # --- topology ------------------------------------------------------------------------

    def add_link(
        self, name: str, rate_bps: float, arbitration: VlArbitration | None = None
    ) -> Link:
        if name in self.links:
            raise ValueError(f"link {name!r} already exists")
        link = Link(self, name, rate_bps, arbitration, self._bucket_s)
        link.order = len(self.links)
        self.links[name] = link
        if arbitration is not None:
            self._sharer.arbitrated_link_added()
        return link

    @property
    def leave_out_inert(self) -> bool:
        """Leave links that cannot bind out of re-shares (cover.py); off: the full re-share,
        for tests. Set it before the first flow."""
        return self._sharer.covering

    @leave_out_inert.setter
    def leave_out_inert(self, on: bool) -> None:
        if self.flows_started:
            raise ValueError("set leave_out_inert before the first flow")
        self._sharer.covering = on

    @property
    def relax_steps(self) -> int:
        """Link share recomputations so far (cost diagnostics for the bench)."""
        return self._sharer.steps

    @property
    def cascade_truncations(self) -> int:
        """Events whose cascade hit `max_cascade` (the rest was carried to the next event)."""
        return self._sharer.cascade_truncations

    def link(self, name: str) -> Link:
        try:
            return self.links[name]
        except KeyError:
            raise KeyError(f"no link named {name!r}") from None

    def set_rate(self, link: Link, rate_bps: float) -> None:
        """Change a link's rate at run time (e.g. an admin knob); flows re-share at once."""
        if not rate_bps > 0 or math.isinf(rate_bps):
            raise ValueError(f"link {link.name!r}: rate must be a finite number > 0")
        t = self._enter()
        self.flush()
        link.settle(t)
        if self._sharer.covering:
            self._sharer.stop_covering(list(self.links.values()))
        link.rate = float(rate_bps)
        self._sharer.rate_changed(link)
        self._relax(t)
        self._leave_call()

    # --- transfers -----------------------------------------------------------------------

    def now(self) -> float:
        """The fabric's emulated time: never behind the last event it processed."""
        if self._advancing:
            return self._t
        t = self._clock_now()
        if self._pending and t > self._pending_t:  # the instant is over: its re-share first
            self._flush()
        return t if t > self._t else self._t

    def flush(self) -> None:
        """Do the re-share owed for this instant's starts and cancels now, if any.

        Reading a flow's `rate` or `remaining` does this; link statistics need not (until
        the instant's end the old rates are the right ones, for a zero-length segment)."""
        if self._pending:
            self._flush()

    def start(
        self,
        nbytes: float,
        hops: Sequence[Link],
        vl: int = 0,
        on_done: Callable[[], None] | None = None,
    ) -> Flow:
        """Begin moving `nbytes` across `hops`; `on_done()` runs when the last byte lands."""
        path = self._validate(nbytes, hops, vl)
        t = self._enter()
        flow = Flow(self, float(nbytes), path, vl, on_done=on_done, t=t)
        self.flows_started += 1
        if nbytes == 0 or not path:
            flow.state, flow.left, flow.finished_at = DONE, 0.0, t
            if on_done is not None:  # never synchronously: callers expect a later callback
                self._call_at(t, on_done)
            return flow
        self.active_flows += 1
        idle = True
        for link in path:
            if link.members:
                idle = False
                if link.t_last != t:
                    link.settle(t)
            elif t > link.t_last:  # what settle() does on an idle link
                link.t_last = t
        sharer = self._sharer
        if idle and self.idle_shortcut and (sharer.settled or self._pending):
            # (With a re-share owed, the queue holds this instant's other joins, on links
            # this flow does not cross: idle links have no members to be queued for.)
            # The common case on a lightly loaded fabric: nothing to re-share, the flow runs
            # at its slowest hop. Same state and floats as join + relax + _apply_rates.
            rate = sharer.join_idle(flow)
            for link in path:
                link.total_rate = rate  # 0.0 + rate: an idle link's rates are exact zeros
            flow._rate = rate
            self._due.push_if_earlier(flow, t + flow.left / rate)
        else:
            sharer.join(flow)
            self._defer(t)
        self._leave_call()
        return flow

    async def transfer(self, nbytes: float, hops: Sequence[Link], vl: int = 0) -> None:
        """Awaitable `start`; cancelling the awaiting task cancels the flow."""
        fut = self._clock.create_future()

        def finished() -> None:
            if not fut.done():
                fut.set_result(None)

        flow = self.start(nbytes, hops, vl, finished)
        try:
            await fut
        except asyncio.CancelledError:
            flow.cancel()
            raise

    def cancel(self, flow: Flow) -> None:
        """Remove an active flow; bytes it already moved stay counted. No callback."""
        if flow.state != ACTIVE:
            return
        t = self._enter()
        if flow.state != ACTIVE:  # it completed while we caught up
            return
        self._detach(flow, t)
        flow.state, flow.on_done, flow.finished_at = CANCELLED, None, t
        self.active_flows -= 1
        self.flows_cancelled += 1
        self._defer(t)
        self._leave_call()

    def _validate(self, nbytes: float, hops: Sequence[Link], vl: int) -> tuple[Link, ...]:
        if not nbytes >= 0 or math.isinf(nbytes):
            raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes}")
        path = tuple(hops)
        for link in path:
            if link._fabric is not self:
                raise ValueError(f"link {link.name!r} belongs to another fabric")
            served = link.vls_served
            if served is not None and vl not in served:
                raise ValueError(f"link {link.name!r}: VL {vl} is in neither arbitration table")
        for i in range(1, len(path)):  # paths are a few hops: cheaper than building a set
            for j in range(i):
                if path[i] is path[j]:
                    raise ValueError("a flow may cross each link once (split it into two flows)")
        return path

    # --- event time ----------------------------------------------------------------------

    def _clock_now(self) -> float:
        core = self._core
        return core.now() if core is not None else self._clock.now()

    def _call_at(self, t: float, callback: Callable[[], None]) -> TimerHandle:
        core = self._core
        return core.call_at(t, callback) if core is not None else self._clock.call_at(t, callback)

    def _enter(self) -> float:
        """Catch up with completions already due, then return the time of this call."""
        if self._advancing:
            return self._t
        t = self._clock_now()
        if self._pending and t > self._pending_t:  # a later instant: the last one's re-share
            self._flush()
        if self._due.next_time() <= t + tolerance(t):
            self._advance(t)
        if t < self._t:  # noqa: PLR1730 - hot path: cheaper than a max() call
            t = self._t
        self._t = t
        return t

    def _leave_call(self) -> None:
        # Inside a completion batch the batch re-arms at its end; with a re-share owed the
        # completion times are not known yet: the flush re-arms.
        if not self._advancing and not self._pending:
            self._arm()

    def _defer(self, t: float) -> None:
        """Owe a re-share at t (this instant) instead of running it now: every start and
        cancel of the instant joins it, and it runs once, before anything can see a rate
        (docs/links.md, "Same-instant starts share one re-share")."""
        if self._pending:
            return
        self._pending = True
        self._pending_t = t
        if not self._advancing:  # a completion batch flushes after its callbacks itself
            self._flush_timer = self._call_at(t, self._on_flush_cb)

    def _on_flush(self) -> None:
        self._flush_timer = None
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        """Run the owed re-share at the instant it is owed for, then re-arm."""
        self._pending = False
        timer = self._flush_timer
        if timer is not None:
            self._flush_timer = None
            timer.cancel()
        self._relax(self._pending_t)
        if not self._advancing:
            self._arm()

    def _on_timer(self) -> None:
        self._timer, self._alarm = None, False
        target, self._timer_t = self._timer_t, INF
        try:
            # Absolute schedule: an early wake-up (RealClock batches sub-ms sleeps) still
            # processes the event at its own emulated time, never drifting.
            self._advance(max(self._clock_now(), target))
        finally:
            self._arm()

    def _advance(self, t_target: float) -> None:
        """Complete every flow due by `t_target`, in time order, each batch at its own time.

        A batch's completions and the starts its callbacks make share one re-share, with
        whatever this instant already owed; up to then, the old rates are exact: they hold
        until this instant."""
        due = self._due
        limit = t_target + tolerance(t_target)
        t_next = due.next_time()
        if t_next > limit:
            return
        self._advancing = True
        try:
            while t_next <= limit:
                t_ev = t_next if t_next > self._t else self._t
                if self._pending and t_ev > self._pending_t:  # an earlier instant's, first
                    self._flush()
                    t_next = due.next_time()
                    continue
                batch = due.pop_due(t_ev)
                if batch:
                    self._t = t_ev
                    self._complete(batch, t_ev)
                if self._pending:  # completion times need the new rates
                    self._flush()
                t_next = due.next_time()
        finally:
            self._advancing = False

    def _complete(self, batch: list[Flow], t: float) -> None:
        for flow in batch:
            self._detach(flow, t)
            flow.state, flow.left, flow.finished_at = DONE, 0.0, t
        self.active_flows -= len(batch)
        self.flows_completed += len(batch)
        self._defer(t)  # one re-share for the batch and what its callbacks start (_advance)
        for flow in batch:
            callback, flow.on_done = flow.on_done, None
            if callback is not None:
                try:
                    callback()
                except Exception as exc:  # not the caller's error: report it like asyncio
                    _report_callback_error(exc, flow)

    def _arm(self) -> None:
        """Keep exactly one clock timer, at the earliest live completion."""
        self._due.compact_if_sparse(self.active_flows)
        t = self._due.next_time()
        if t == INF:
            if self._timer_t != INF:
                self._disarm()
            return
        if self._timer_t != INF:
            if self._timer_t <= t:
                return  # an earlier wake-up is harmless: it finds nothing due and re-arms
            self._disarm()
        self._timer_t = t
        core = self._alarm_core
        if core is not None and t > core.now():  # the core's alarm slot: no heap entry
            core.set_alarm(t, self._on_timer_cb)
            self._alarm = True
        else:
            self._timer = self._call_at(t, self._on_timer_cb)

    def _disarm(self) -> None:
        if self._alarm:
            assert self._alarm_core is not None
            self._alarm_core.clear_alarm()
            self._alarm = False
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_t = INF

    # --- sharing -------------------------------------------------------------------------

    def _detach(self, flow: Flow, t: float) -> None:
        """Take a flow off its links at t (settling its progress and the links' meters);
        each hop's VL is charged the bytes the flow moved (its rates' integral, as the
        link's total is: a completion within tolerance leaves a residue of a few bytes)."""
        rate, vl = flow._rate, flow.vl
        left = flow.left - rate * (t - flow.t_last)
        left = left if left > 0.0 else 0.0
        flow.left = left
        flow.t_last = t
        moved = flow.nbytes - left
        for link in flow.hops:
            if link.t_last != t:
                link.settle(t)
            if len(link.members) > 1:
                rest = link.total_rate - rate
                link.total_rate = rest if rest > 0.0 else 0.0
            else:  # an idle link restarts from exact zeros: no accumulated float drift
                link.total_rate = 0.0
            if moved > 0.0:
                link.vl_bytes[vl] += moved
        self._sharer.leave(flow)
        flow._rate = 0.0

    def _relax(self, t: float) -> None:
        """Re-share the links this event touched (bounded cascade), then apply new rates."""
        self.relaxes += 1
        self._sharer.relax()
        self._apply_rates(t)

    def _apply_rates(self, t: float) -> None:
        """Give every touched flow its new rate (min over its hops), settling at t first."""
        sharer = self._sharer
        touched = sharer.touched
        if not touched:
            return
        sharer.touched = []
        due = self._due
        for flow in touched:
            flow.in_touched = False
            if flow.state != ACTIVE:  # it left after its shares changed
                continue
            # The minimum of the hops' shares by hand: the one-argument `min` is a generic
            # call compiled (module lookup, argument parsing, an iterator), a loop is not
            legs = flow.legs
            rate = legs[0].alloc
            for i in range(1, len(legs)):
                share = legs[i].alloc
                if share < rate:  # noqa: PLR1730 - hot path: cheaper than a min() call
                    rate = share
            delta = rate - flow._rate
            if delta == 0.0:
                continue
            flow.left = max(0.0, flow.left - flow._rate * (t - flow.t_last))
            flow.t_last = t
            for link in flow.hops:
                if link.t_last != t:
                    link.settle(t)
                link.total_rate += delta
            flow._rate = rate
            if rate > 0.0:  # a later finish keeps the old, earlier entry (lazy re-queue)
                due.push_if_earlier(flow, t + flow.left / rate)


def _report_callback_error(exc: Exception, flow: Flow) -> None:
    """Hand an `on_done` exception to the loop's handler, as asyncio does for callbacks.

    Raising instead would surface it in whichever unrelated `start()` caught up with the
    completion, and would skip the rest of the batch's callbacks.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise exc from None
    loop.call_exception_handler({"message": f"exception in on_done of {flow!r}", "exception": exc})
