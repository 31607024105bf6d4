"""Work-conserving share computation across links (no time, no asyncio).

Model (a distributed max-min / "advertised rate" scheme, Charny et al.): every hop i of a flow
publishes an *offer*: its share for the flow if that hop limits the flow (share < what the
flow could use), else INF. The flow's *cap* on hop i is the minimum of its other hops' offers,
i.e. what the rest of the path lets it use. A link splits its rate among its flows given their
caps (`arbitration.allocate`: processor sharing or VL arbitration, water-filling so unused share
goes to the others); a flow's rate is the minimum of its per-hop shares. When an offer changes,
the caps on the flow's other hops change and those links are recomputed: a cascade, bounded
per event by `max_cascade` link recomputations (the rest is carried to the next event).

Cost is proportional to what an event touches: only links whose flow set or flows' caps changed
are recomputed; a link left idle is not recomputed at all; a flow whose hops are all idle gets
the cascade's end state in closed form (`join_idle`). Links whose flows are all limited
elsewhere (storage service, DRAM in the bottleneck-free range) are recomputed in O(flows whose
cap changed) via running aggregates, not O(members). Every shortcut here reproduces the general
cascade bit for bit (same floats, same order), so results do not depend on which path ran.
"""

from __future__ import annotations

from math import fsum
from typing import Final

from dualpath.model.links.cover import clear, coverable, join_covers, remove
from dualpath.model.links.link import Flow, Hop, Link
from dualpath.model.links.passes import (
    INF,
    MODE_FULL,
    by_fair_share,
    recompute,
    single_pass,
)

_MEMO_MAX: Final = 4096  # arbitrated splits kept (cleared when full: bounded memory) ...
# ... or this many per arbitrated link, if more: a 48P96D fabric has 2,304 CNIC directions,
# and a memo sized for one 2P4D unit (96) was cleared so often that its hit rate collapsed.
_MEMO_PER_LINK: Final = 32


class Sharer:
    """Owns the dirty-link queue and the set of flows whose per-hop shares changed."""

    __slots__ = (
        "_arbitrated",
        "_queue",
        "cascade_truncations",
        "covering",
        "max_cascade",
        "memo",
        "memo_max",
        "steps",
        "touched",
    )

    def __init__(self, max_cascade: int) -> None:
        self.max_cascade = max_cascade
        # FIFO of dirty links: a list read from a head index, where a deque's methods were
        # generic calls in a compiled build (mypyc has no native deque).
        self._queue: list[Link] = []
        # VL-arbitrated splits by (link, VLs, caps): a pure function of those and the link's
        # rate and tables, and the same few configurations recur (a KV flow next to a model
        # flow, both uncapped), so a hit returns the very floats `allocate` would.
        self.memo: dict[tuple[Link, tuple[int, ...], tuple[float, ...]], list[float]] = {}
        self.memo_max = _MEMO_MAX
        self._arbitrated = 0
        # Flows whose per-hop shares changed, in first-touched order (deterministic runs);
        # `flow.in_touched` marks them (a list and a flag: cheaper than a dict compiled).
        self.touched: list[Flow] = []
        self.steps = 0
        self.cascade_truncations = 0
        # Leave links that cannot bind out of re-shares (cover.py); off: every link shares.
        self.covering = True

    @property
    def settled(self) -> bool:
        """No link waits for a recomputation (nothing carried over from a cut cascade)."""
        return not self._queue

    def arbitrated_link_added(self) -> None:
        """The memo grows with the links that use it (its hits are per link)."""
        self._arbitrated += 1
        self.memo_max = max(_MEMO_MAX, _MEMO_PER_LINK * self._arbitrated)

    def mark(self, link: Link) -> None:
        if not link.dirty:
            link.dirty = True
            self._queue.append(link)

    def join(self, flow: Flow) -> None:
        vl = flow.vl
        hops = flow.hops
        legs = flow.legs
        for i, link in enumerate(hops):
            link.members[flow] = legs[i]
            count = link.vl_count
            on_vl = count[vl]
            if not on_vl:
                link.vls += 1
            count[vl] = on_vl + 1
        if self.covering:
            join_covers(flow)
        for i, link in enumerate(hops):
            if link.inert:
                if coverable(link):
                    legs[i].alloc = INF  # a left-out hop limits no one
                    continue
                self._make_live(link)
            else:
                hop = legs[i]
                link.inf_members[flow] = hop  # every offer starts INF, so every cap does too
                link.pending[flow] = hop
                if self.covering and coverable(link):
                    self._make_inert(link)
        # Likely bottleneck first: its offer then reaches the roomier hops before they are
        # recomputed, which saves a round of the cascade.
        for link in hops if len(hops) == 1 else by_fair_share(hops):
            if not link.inert:
                self.mark(link)

    def _make_inert(self, link: Link) -> None:
        """Leave a link that cannot bind out of re-shares: it offers INF and limits no one."""
        link.inert = True
        touched = self.touched
        for flow, hop in link.members.items():
            if hop.alloc != INF:
                hop.alloc = INF
                if not flow.in_touched:
                    flow.in_touched = True
                    touched.append(flow)
            if hop.offer != INF:
                self.publish(flow, hop.i, INF)
        link.inf_members.clear()
        link.pending.clear()
        link.fin_sum, link.cap_max, link.mode = 0.0, 0.0, MODE_FULL

    def _make_live(self, link: Link) -> None:
        """Bring a left-out link back: rebuild its aggregates from its flows' caps (kept up to
        date while it was out) and recompute it."""
        link.inert = False
        finite = []
        inf_members, pending = link.inf_members, link.pending
        for flow, hop in link.members.items():
            cap = hop.cap
            if cap == INF:
                inf_members[flow] = hop
            else:
                finite.append(cap)
            pending[flow] = hop
        link.fin_sum = fsum(finite)
        link.cap_max = max(finite, default=0.0)
        link.mode = MODE_FULL
        self.mark(link)

    def stop_covering(self, links: list[Link]) -> None:
        """A rate changed, hence the links' ranks: every link shares from now on."""
        self.covering = False
        for link in links:
            if link.inert:
                self._make_live(link)

    def join_idle(self, flow: Flow) -> float:
        """`join` + `relax` in closed form for a flow whose hops are all idle, when no link is
        dirty (`settled`); returns the flow's rate. Callers apply it (not put in `touched`).

        The cascade would visit the hops slowest first (stable sort): the first slowest hop p
        grants its whole rate r and offers r, so every other hop gets cap r, grants r and
        offers INF (a tie is not a bottleneck). This writes exactly that end state.
        """
        hops = flow.hops
        n = len(hops)
        covering = self.covering
        if covering:
            join_covers(flow)
        p, r = -1, INF
        for k in range(n):
            link = hops[k]
            if covering and coverable(link):  # left out: its cover is slower
                link.inert = True
            elif p < 0 or link.rate < r:
                p, r = k, link.rate
        vl = flow.vl
        # A new flow's hops, filled in place: their offers and caps start INF (`Hop`).
        legs = flow.legs
        for k, link in enumerate(hops):
            hop = legs[k]
            link.members[flow] = hop
            link.vl_count[vl] = 1
            link.vls = 1
            if k == p:
                hop.alloc = r
                hop.offer = r
                link.inf_members[flow] = hop
                link.fin_sum = link.cap_max = 0.0
            else:
                hop.alloc = INF if link.inert else r
                hop.cap = r
                if not link.inert:
                    link.fin_sum = link.cap_max = r
            link.mode = MODE_FULL
        self.steps += n
        return r

    def leave(self, flow: Flow) -> None:
        vl = flow.vl
        covers = flow.covers if self.covering else None
        legs = flow.legs
        for i, link in enumerate(flow.hops):
            members = link.members
            del members[flow]
            count = link.vl_count
            left_on_vl = count[vl] - 1
            count[vl] = left_on_vl
            if not left_on_vl:
                link.vls -= 1
            if covers is not None:
                remove(link, covers[i])
            if not members:  # an idle link restarts from exact zeros and has nothing to re-share
                link.pending.clear()
                link.inf_members.clear()
                link.fin_sum, link.cap_max, link.mode = 0.0, 0.0, MODE_FULL
                clear(link)
            elif not link.inert:  # (a left-out link stays out: its covers only shrank)
                pending = link.pending
                if flow in pending:  # (`pop(flow, None)` is a generic method call compiled)
                    del pending[flow]
                if flow in link.inf_members:
                    del link.inf_members[flow]
                else:
                    link.fin_sum -= legs[i].cap
                self.mark(link)
                if covers is not None and coverable(link):
                    self._make_inert(link)
        # (left in `touched` if it is there: applying rates skips flows no longer active)

    def rate_changed(self, link: Link) -> None:
        link.mode = MODE_FULL  # (the caller stops covering first: ranks may have moved)
        self.memo.clear()  # keyed without the rate: a rate change is rare
        self.mark(link)

    def relax(self) -> None:
        """Recompute dirty links, cascading; leaves new per-hop shares in `touched` flows."""
        queue = self._queue
        if not queue:
            return
        budget = len(queue) + self.max_cascade
        steps = 0
        head = 0
        while head < len(queue):  # the cascade appends to `queue` as it goes
            if steps >= budget:
                self.cascade_truncations += 1
                break
            link = queue[head]
            head += 1
            link.dirty = False
            if link.inert:  # left out after it was queued
                link.pending.clear()
                continue
            n = len(link.members)
            if n == 1:
                single_pass(self, link)
            elif n:
                recompute(self, link)
            link.pending.clear()
            steps += 1
        self.steps += steps
        if head < len(queue):  # cut: the rest waits for the next event
            self._queue = queue[head:]
        else:
            queue.clear()

    # --- one link ------------------------------------------------------------------------

    def publish(self, flow: Flow, i: int, offer: float) -> None:
        """Hop i's offer changed: the caps on the flow's other hops follow."""
        legs = flow.legs
        legs[i].offer = offer
        n = len(legs)
        if n == 2:
            self._set_cap(flow, legs[1 - i], offer)
        elif n == 3:  # the common DRAM -> CNIC -> CNIC path, without a generator
            h0, h1, h2 = legs
            o0, o1, o2 = h0.offer, h1.offer, h2.offer
            if i != 0:
                self._set_cap(flow, h0, o1 if o1 < o2 else o2)
            if i != 1:
                self._set_cap(flow, h1, o0 if o0 < o2 else o2)
            if i != 2:
                self._set_cap(flow, h2, o0 if o0 < o1 else o1)
        elif n > 3:
            for j in range(n):
                if j != i:
                    cap = INF
                    for k in range(n):
                        if k != j:
                            o = legs[k].offer
                            if o < cap:  # noqa: PLR1730 - hot path: cheaper than a min() call
                                cap = o
                    self._set_cap(flow, legs[j], cap)

    def _set_cap(self, flow: Flow, hop: Hop, cap: float) -> None:
        old = hop.cap
        if cap == old:
            return
        hop.cap = cap
        link = flow.hops[hop.i]
        if link.inert:  # kept for when it comes back (`_make_live`)
            return
        if old == INF:
            del link.inf_members[flow]
        else:
            link.fin_sum -= old
        if cap == INF:
            link.inf_members[flow] = hop
        else:
            link.fin_sum += cap
            if cap > link.cap_max:  # noqa: PLR1730 - hot path: cheaper than a max() call
                link.cap_max = cap
        link.pending[flow] = hop
        if not link.dirty:
            link.dirty = True
            self._queue.append(link)
