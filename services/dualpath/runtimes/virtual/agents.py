"""Agents on virtual time as state machines: each replays its session turn by turn through
callbacks at scheduled times (a turn ends, its think time passes), no coroutine per agent.

`Turns` submits a turn to the scheduler and calls its agent back when the turn's last
token is out (the scheduler's `finished` hook); `Agent` is one closed-loop session,
`OpenLoopAgent` one trace session whose turns come at their own trace times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from dualpath.model.core.virtual_core import timing_of
from dualpath.model.engines.cluster import Cluster
from dualpath.model.entities.request import Request
from dualpath.model.workload.script import AgentScript

Then = Callable[[], None]


class RequestIds:
    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


class Turns:
    """Submits turns and hands each one's end back to whoever submitted it."""

    def __init__(self, cluster: Cluster, on_turn: Then | None = None) -> None:
        self.cluster = cluster
        self.timing = timing_of(cluster.clock)  # natively on the virtual core, compiled
        self.next_rid = RequestIds()
        # After every turn (a progress bar); None: nothing, where a do-nothing callback was
        # an interpreted call a turn (the drivers are not compiled).
        self._on_turn = on_turn
        self.done = 0  # turns ended
        self._waiting: dict[int, Then] = {}  # rid -> what to do when it ends
        cluster.scheduler.finished = self._finished

    def submit(self, script: AgentScript, i: int, then: Then) -> None:
        """Turn `i` of `script` as a request on its KV chain; `then()` when it ends."""
        turn = script.turns[i]
        req = Request(
            rid=self.next_rid(),
            session=turn.chain,
            turn=i,
            prompt=turn.prompt,
            gen=turn.gen,
            arrival=self.timing.now(),
        )
        self._waiting[req.rid] = then
        self.cluster.scheduler.submit(req)

    def _finished(self, req: Request) -> None:
        waiting = self._waiting
        then = waiting.get(req.rid)  # (`pop(rid, None)` is a generic method call compiled)
        if then is not None:
            del waiting[req.rid]
            self.done += 1
            on_turn = self._on_turn
            if on_turn is not None:
                on_turn()
            then()


class Agent:
    """Replays one session turn by turn, each after the previous one's last token and its
    think time (the script's, or `think_time_s` when given); `on_end()` after the last,
    or once `keep_going()` says no more turns."""

    __slots__ = ("_i", "_keep_going", "_on_end", "_think", "_turns", "script")

    def __init__(
        self,
        turns: Turns,
        script: AgentScript,
        on_end: Then,
        *,
        think_time_s: float | None = None,
        keep_going: Callable[[], bool] | None = None,
    ) -> None:
        self._turns = turns
        self.script = script
        self._on_end = on_end
        self._think = think_time_s
        self._keep_going = keep_going
        self._i = 0

    def start(self) -> None:
        """The first turn, now."""
        self._submit()

    @property
    def completed(self) -> bool:
        """Every turn of the script ran (not cut short by `keep_going`)."""
        return self._i >= len(self.script.turns)

    def _submit(self) -> None:
        if self._keep_going is not None and not self._keep_going():
            self._on_end()
            return
        self._turns.submit(self.script, self._i, self._ended)

    def _ended(self) -> None:
        self._i += 1
        turns = self.script.turns
        if self._i >= len(turns):
            self._on_end()
            return
        think = turns[self._i].think_s if self._think is None else self._think
        if think > 0:
            timing = self._turns.timing
            timing.call_at(timing.now() + think, self._submit)
        else:
            self._submit()


class OpenLoopAgent:
    """Open-loop replay: every turn at its own trace time, whether or not the one before it
    has finished (what a trace's timestamps say, not what the cluster allows)."""

    __slots__ = ("_left", "_on_end", "_turns", "script")

    def __init__(self, turns: Turns, script: AgentScript, on_end: Then) -> None:
        self._turns = turns
        self.script = script
        self._on_end = on_end
        self._left = len(script.turns)

    def start(self) -> None:
        timing = self._turns.timing
        if not self._left:
            self._on_end()
        for i, turn in enumerate(self.script.turns):
            timing.call_at(turn.at_s, functools.partial(self._submit, i))

    def _submit(self, i: int) -> None:
        self._turns.submit(self.script, i, self._ended)

    def _ended(self) -> None:
        self._left -= 1
        if not self._left:
            self._on_end()
