"""Work-conserving share computation across links (no time, no asyncio).

Model (a distributed max-min / "advertised rate" scheme, Charny et al.): every hop i of a flow
publishes an *offer*: its share for the flow if that hop limits the flow (share < what the
flow could use), else INF. The flow's *cap* on hop i is the minimum of its other hops' offers,
i.e. what the rest of the path lets it use. A link splits its rate among its flows given their
caps (`arbitration.allocate`: processor sharing or VL arbitration, water-filling so unused share
goes to the others); a flow's rate is the minimum of its per-hop shares. When an offer changes,
the caps on the flow's other hops change and those links are recomputed: a cascade, bounded
per event by `max_cascade` link recomputations (the rest is carried to the next event).

Links whose flows are all limited elsewhere (storage service, DRAM in the bottleneck-free
range) are recomputed in O(flows whose cap changed) via running aggregates, not O(members).
"""

from __future__ import annotations

import math
from collections import deque

from dualpath.links.arbitration import allocate, equal_waterfill
from dualpath.links.link import Flow, Link

INF = math.inf
# A share below cap x this means "this hop is the bottleneck" (ties count as not limiting).
_BOTTLENECK = 1.0 - 1e-9
# Offers that move by less than this (relative) are not propagated: stops float-noise churn.
_OFFER_RTOL = 1e-9
# Aggregate fast paths need this much headroom so drift in running sums can never overbook.
_SLACK = 1.0 - 1e-9
MODE_FULL, MODE_FREE = 0, 1


class Sharer:
    """Owns the dirty-link queue and the set of flows whose per-hop shares changed."""

    __slots__ = ("_queue", "cascade_truncations", "max_cascade", "steps", "touched")

    def __init__(self, max_cascade: int) -> None:
        self.max_cascade = max_cascade
        self._queue: deque[Link] = deque()
        self.touched: dict[Flow, None] = {}  # insertion-ordered: keeps runs deterministic
        self.steps = 0
        self.cascade_truncations = 0

    def mark(self, link: Link) -> None:
        if not link.dirty:
            link.dirty = True
            self._queue.append(link)

    def join(self, flow: Flow) -> None:
        vl = flow.vl
        hops = flow.hops
        for i, link in enumerate(hops):
            link.members[flow] = i
            link.vl_members[vl] = link.vl_members.get(vl, 0) + 1
            link.inf_members[flow] = None  # every offer starts INF, so every cap does too
            link.pending[flow] = None
        # Likely bottleneck first: its offer then reaches the roomier hops before they are
        # recomputed, which saves a round of the cascade.
        order = hops if len(hops) == 1 else sorted(hops, key=_fair_share)
        for link in order:
            self.mark(link)

    def leave(self, flow: Flow) -> None:
        vl = flow.vl
        for i, link in enumerate(flow.hops):
            del link.members[flow]
            left_on_vl = link.vl_members[vl] - 1
            if left_on_vl:
                link.vl_members[vl] = left_on_vl
            else:
                del link.vl_members[vl]
            link.pending.pop(flow, None)
            if flow in link.inf_members:
                del link.inf_members[flow]
            else:
                link.fin_sum -= flow.cap[i]
            if not link.members:  # an idle link restarts from exact zeros
                link.fin_sum, link.cap_max, link.mode = 0.0, 0.0, MODE_FULL
            self.mark(link)
        self.touched.pop(flow, None)

    def rate_changed(self, link: Link) -> None:
        link.mode = MODE_FULL
        self.mark(link)

    def relax(self) -> None:
        """Recompute dirty links, cascading; leaves new per-hop shares in `touched` flows."""
        queue = self._queue
        budget = len(queue) + self.max_cascade
        steps = 0
        while queue:
            if steps >= budget:
                self.cascade_truncations += 1
                break
            link = queue.popleft()
            link.dirty = False
            self._recompute(link)
            steps += 1
        self.steps += steps

    # --- one link ------------------------------------------------------------------------

    def _recompute(self, link: Link) -> None:
        members = link.members
        if len(members) <= 1:
            if members:
                self._single_pass(link)
            link.pending.clear()
            return
        # One VL on an arbitrated link behaves like plain sharing: the arbiter is
        # work-conserving, so a lone VL gets the whole link.
        plain = link.plain or len(link.vl_members) == 1
        n_inf = len(link.inf_members)
        headroom = link.rate - link.fin_sum
        if n_inf == 0:
            free = headroom >= link.rate * (1.0 - _SLACK)
            level = INF
        else:  # only plain links: with VL arbitration an uncapped VL0 flow may squeeze VL2
            level = headroom / n_inf
            free = plain and link.cap_max <= level * _SLACK
        if free:
            self._free_pass(link, level)
        else:
            self._full_pass(link, plain)
        link.pending.clear()

    def _single_pass(self, link: Link) -> None:
        for flow, i in link.members.items():
            cap = flow.cap[i]
            share = cap if cap < link.rate else link.rate
            self._grant(flow, i, share, share if share < cap * _BOTTLENECK else INF)
            link.fin_sum = link.cap_max = cap if cap != INF else 0.0
        link.mode = MODE_FULL

    def _free_pass(self, link: Link, level: float) -> None:
        """No capped flow is limited here: capped flows get their cap, uncapped ones share the
        rest equally. After a free pass only flows whose cap changed need revisiting."""
        members = link.members
        inf_members = link.inf_members
        touched = self.touched
        for flow in link.pending if link.mode == MODE_FREE else members:
            if flow in inf_members:
                continue
            i = members[flow]
            cap = flow.cap[i]
            alloc = flow.alloc
            if alloc[i] != cap:
                alloc[i] = cap
                touched[flow] = None
            if flow.offer[i] != INF:
                self._publish(flow, i, INF)
        for flow in inf_members:
            self._grant(flow, members[flow], level, level)
        link.mode = MODE_FREE

    def _full_pass(self, link: Link, plain: bool) -> None:
        members = link.members
        caps = [flow.cap[i] for flow, i in members.items()]
        arb = link.arbitration
        if arb is None or plain:
            shares = equal_waterfill(link.rate, caps)
        else:
            shares = allocate(link.rate, arb, [flow.vl for flow in members], caps)
        finite = [c for c in caps if c != INF]
        link.fin_sum = math.fsum(finite)  # re-anchor the running aggregates exactly
        link.cap_max = max(finite, default=0.0)
        for (flow, i), cap, share in zip(members.items(), caps, shares, strict=True):
            self._grant(flow, i, share, share if share < cap * _BOTTLENECK else INF)
        link.mode = MODE_FULL

    def _grant(self, flow: Flow, i: int, share: float, offer: float) -> None:
        """Record hop i's share for the flow and publish its offer if it moved."""
        alloc = flow.alloc
        if alloc[i] != share:
            alloc[i] = share
            self.touched[flow] = None
        old = flow.offer[i]
        if offer == old or (offer < INF and old < INF and abs(offer - old) <= _OFFER_RTOL * old):
            return
        self._publish(flow, i, offer)

    def _publish(self, flow: Flow, i: int, offer: float) -> None:
        """Hop i's offer changed: the caps on the flow's other hops follow."""
        offers = flow.offer
        offers[i] = offer
        n = len(offers)
        if n == 2:
            self._set_cap(flow, 1 - i, offer)
        elif n == 3:  # the common DRAM -> CNIC -> CNIC path, without a generator
            o0, o1, o2 = offers
            if i != 0:
                self._set_cap(flow, 0, o1 if o1 < o2 else o2)
            if i != 1:
                self._set_cap(flow, 1, o0 if o0 < o2 else o2)
            if i != 2:
                self._set_cap(flow, 2, o0 if o0 < o1 else o1)
        elif n > 3:
            for j in range(n):
                if j != i:
                    self._set_cap(flow, j, min(o for k, o in enumerate(offers) if k != j))

    def _set_cap(self, flow: Flow, j: int, cap: float) -> None:
        old = flow.cap[j]
        if cap == old:
            return
        flow.cap[j] = cap
        link = flow.hops[j]
        if old == INF:
            del link.inf_members[flow]
        else:
            link.fin_sum -= old
        if cap == INF:
            link.inf_members[flow] = None
        else:
            link.fin_sum += cap
            if cap > link.cap_max:  # noqa: PLR1730 - hot path: cheaper than a max() call
                link.cap_max = cap
        link.pending[flow] = None
        if not link.dirty:
            link.dirty = True
            self._queue.append(link)


def _fair_share(link: Link) -> float:
    return link.rate / len(link.members)
