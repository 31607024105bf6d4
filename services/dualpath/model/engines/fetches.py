"""When the engine groups' leaders fetch from the scheduler's queues (paper §6.1).

Each group's leader polls every `engine.fetch_interval_ms`. With `fetch_mode = "on-change"`
a group fetches only when something it cares about changed (a request queued, one
of its engines freed work): the change *kicks* the group, which fetches at once or when its
interval since the last fetch is up. Polls at which nothing changed would assign nothing,
so the outcome is the same at a fraction of the events. `"periodic"` polls regardless.

Several PE groups share the one FIFO queue, and the first leader to fetch takes what its
engines' β allows; the paper does not say which comes first. Arrivals are offered to the
PE groups least loaded first, ties in turn, and periodic leaders poll out of phase
(docs/scheduling.md).

`"per-forward"` (default) is `"on-change"` except that a PE group in the middle of a
forward does not fetch: the kick is held until the forward ends, as a serving engine's loop
takes new requests once per iteration, between forwards (docs/fidelity.md, "When a PE group
fetches"). DE groups fetch as in `"on-change"`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from dualpath.model.config.sections import Engine
from dualpath.model.core.clock import Clock, TimerHandle
from dualpath.model.core.virtual_core import timing_of
from dualpath.model.entities.request import EngineState


class GroupFetches:
    """Schedules every group's fetches on the clock; `fetch(side, group)` runs one.

    Internally a group is a slot: PE group g is slot g, DE group g slot (PE groups) + g, so
    a kick, which visits every PE group at every arrival (24 at 48P96D), indexes lists
    instead of hashing a ("pe", g) tuple into sets and dicts per group."""

    def __init__(
        self,
        clock: Clock,
        engine: Engine,
        pe_groups: list[list[EngineState]],  # lists, not Sequences: `pe_order` loops over
        de_groups: int,  # every PE per arrival, natively compiled over a list
        fetch: Callable[[str, int], None],
    ) -> None:
        self._clock = timing_of(clock)  # now/call_at natively on the virtual core, compiled
        self._periodic = engine.fetch_mode == "periodic"
        # PE group g is in the middle of a forward: set by the scheduler in "per-forward"
        # mode only (None: groups fetch whatever their engines are doing).
        self.pe_busy: Callable[[int], bool] | None = None
        self._held: set[int] = set()  # PE groups whose kick waits for their forward's end
        self._interval = engine.fetch_interval_ms / 1000
        self._pe_groups = pe_groups
        self._de_groups = de_groups
        self._fetch_group = fetch
        n_pe = self._n_pe = len(pe_groups)
        slots = n_pe + de_groups
        self._pending = [False] * slots  # a fetch is scheduled
        # When each slot last fetched: -interval before its first, so that the first kick
        # fetches at once (max(now, -interval + interval) = now).
        self._last = [-self._interval] * slots
        self._polls: dict[int, TimerHandle] = {}
        # One callback per slot, made once: a kick is per arrival and per group.
        self._calls: list[Callable[[], None]] = [
            functools.partial(self._fetch, k) for k in range(slots)
        ]
        self._pe_turn = 0  # the PE group that wins the next tie (`pe_order`)

    def start(self) -> None:
        """Periodic mode: start the polls. PE leaders poll out of phase (group g at g/n of
        an interval), so that no group is always the first to see an arrival."""
        if not self._periodic:
            return
        n = self._n_pe
        for g in range(n):
            if g == 0:
                self._poll(g)
            else:
                first = self._clock.now() + self._interval * g / n
                self._polls[g] = self._clock.call_at(first, functools.partial(self._poll, g))
        for g in range(self._de_groups):
            self._poll(n + g)

    def stop(self) -> None:
        """Stop the periodic polls (nothing else keeps running on its own)."""
        for handle in self._polls.values():
            handle.cancel()
        self._polls.clear()

    def kick(self, side: str, groups: Sequence[int] | range) -> None:
        """What these groups care about changed: each fetches once its interval is up."""
        if self._periodic:
            return  # the next poll will see the change
        pe = side == "pe"
        if isinstance(groups, list):  # (a list loops natively compiled, a Sequence not)
            for g in groups:
                self._kick(pe, g)
        else:
            for g in groups:
                self._kick(pe, g)

    def kick_every(self, side: str) -> None:
        """`kick` for every group of a side."""
        if self._periodic:
            return
        pe = side == "pe"
        for g in range(self._n_pe if pe else self._de_groups):
            self._kick(pe, g)

    def _kick(self, pe: bool, g: int) -> None:
        k = g if pe else self._n_pe + g
        if self._pending[k]:
            return
        busy = self.pe_busy
        if pe and busy is not None and busy(g):
            self._held.add(g)
            return
        self._pending[k] = True
        timing = self._clock
        now = timing.now()
        due = self._last[k] + self._interval
        timing.call_at(due if due > now else now, self._calls[k])  # max(now, due)

    def forward_ended(self, g: int) -> None:
        """A forward of PE group g ended, and its next one is not formed yet: a kick held
        during the forward fetches now, as an engine loop takes new requests between
        iterations (the group still counts as busy here: no busy check)."""
        if g in self._held:
            self._held.discard(g)
            self._last[g] = self._clock.now()
            self._fetch_group("pe", g)

    def pe_order(self) -> list[int] | range:
        """PE groups least loaded first (Σ tok_e of the group), ties in turn.

        Always group 0 first handed it 94 % of the requests at 4P8D (two groups) and left
        the other group's PEs and SNICs mostly idle. Least loaded first is the paper's own
        rule for DE groups (phase 1); ties (idle groups) go round in turn, else group 0
        would still take every request of a light load."""
        groups = self._pe_groups
        n = len(groups)
        if n == 1:
            return range(1)
        turn = self._pe_turn
        # Explicit loops, no generator per group: this runs at every arrival over every
        # PE of the cluster (384 at 48P96D).
        # One int per group sorts as the pair (load, turn distance) would, since that
        # distance is below n: no lambda call and no tuple per group.
        keys = [0] * n
        for g in range(n):
            group = groups[g]
            load = group[0].load if group else None
            if load is not None and load.size == len(group):  # Σ tok_e, kept (GroupLoad)
                total = load.tok
            else:
                total = 0
                for e in group:
                    total += e.tok
            keys[g] = total * n + (g - turn) % n
        # The keys are distinct (their remainders are), so sorting the keys themselves
        # orders the groups as sorting the indices by key would, and each key gives its
        # group back: a plain sort of ints, where a key function was a call per group.
        keys.sort()
        order = [(key % n + turn) % n for key in keys]
        self._pe_turn = (order[0] + 1) % n
        return order

    def _poll(self, k: int) -> None:
        self._fetch(k)
        when = self._clock.now() + self._interval
        self._polls[k] = self._clock.call_at(when, functools.partial(self._poll, k))

    def _fetch(self, k: int) -> None:
        self._pending[k] = False
        n_pe = self._n_pe
        busy = self.pe_busy
        if busy is not None and k < n_pe and busy(k):  # per-forward: a forward began
            self._held.add(k)  # since the kick; the group fetches when it ends
            return
        self._last[k] = self._clock.now()
        if k < n_pe:
            self._fetch_group("pe", k)
        else:
            self._fetch_group("de", k - n_pe)
