"""One link's share computation: the passes `Sharer.relax` runs on a dirty link (no time,
no asyncio). Split from sharing.py, which owns the cascade; these own one link.

- `single_pass`: one flow, the most common recomputation;
- the free pass: no capped flow is limited here, so capped flows get their cap and uncapped
  ones share the rest equally (O(flows whose cap changed) after the first);
- the full pass: a water-fill over every member (`arbitration`), memoised for VL-arbitrated
  links.

Each writes a flow's per-hop share (`Hop.alloc`) and, when it changes, its offer
(`Sharer.publish`), and keeps the link's running aggregates (`fin_sum`, `cap_max`) exact.
"""

from __future__ import annotations

import math
from math import fsum
from typing import TYPE_CHECKING, Final

from dualpath.model.links.arbitration import allocate, equal_waterfill
from dualpath.model.links.link import Link

if TYPE_CHECKING:
    from dualpath.model.links.sharing import Sharer

INF: Final = math.inf
# A share below cap x this means "this hop is the bottleneck" (ties count as not limiting).
_BOTTLENECK: Final = 1.0 - 1e-9
# Offers that move by less than this (relative) are not propagated: stops float-noise churn.
OFFER_RTOL: Final = 1e-9
# Aggregate fast paths need this much headroom so drift in running sums can never overbook.
_SLACK: Final = 1.0 - 1e-9
MODE_FULL: Final = 0
MODE_FREE: Final = 1


def recompute(sh: Sharer, link: Link) -> None:
    """A link with two or more flows: the aggregate fast path, or a full water-fill."""
    # One VL on an arbitrated link behaves like plain sharing: the arbiter is
    # work-conserving, so a lone VL gets the whole link.
    plain = link.plain or link.vls == 1
    n_inf = len(link.inf_members)
    headroom = link.rate - link.fin_sum
    if n_inf == 0:
        free = headroom >= link.rate * (1.0 - _SLACK)
        level = INF
    else:  # only plain links: with VL arbitration an uncapped VL0 flow may squeeze VL2
        level = headroom / n_inf
        free = plain and link.cap_max <= level * _SLACK
    if free:
        _free_pass(sh, link, level)
    else:
        _full_pass(sh, link, plain)


def single_pass(sh: Sharer, link: Link) -> None:
    """One flow: it gets the link's rate, or its cap if that is lower (`_grant` inlined:
    this is the most common recomputation)."""
    for flow, hop in link.members.items():
        cap = hop.cap
        rate = link.rate
        share = cap if cap < rate else rate
        offer = share if share < cap * _BOTTLENECK else INF
        if hop.alloc != share:
            hop.alloc = share
            if not flow.in_touched:
                flow.in_touched = True
                sh.touched.append(flow)
        old = hop.offer
        if offer != old and not (
            offer < INF and old < INF and abs(offer - old) <= OFFER_RTOL * old
        ):
            sh.publish(flow, hop.i, offer)
        link.fin_sum = link.cap_max = cap if cap != INF else 0.0
    link.mode = MODE_FULL


def _free_pass(sh: Sharer, link: Link, level: float) -> None:
    """No capped flow is limited here: capped flows get their cap, uncapped ones share the
    rest equally. After a free pass only flows whose cap changed need revisiting."""
    touched = sh.touched
    # (Every flow's hop comes with it; a flow's cap here is INF exactly when it is in
    # `inf_members`, so the INF test below reads the cap instead of hashing the flow.)
    for flow, hop in (link.pending if link.mode == MODE_FREE else link.members).items():
        cap = hop.cap
        if cap == INF:
            continue
        if hop.alloc != cap:
            hop.alloc = cap
            if not flow.in_touched:
                flow.in_touched = True
                touched.append(flow)
        if hop.offer != INF:
            sh.publish(flow, hop.i, INF)
    for flow, hop in link.inf_members.items():  # `_grant(flow, hop, level, level)`, inlined
        if hop.alloc != level:
            hop.alloc = level
            if not flow.in_touched:
                flow.in_touched = True
                touched.append(flow)
        old = hop.offer
        if level != old and not (
            level < INF and old < INF and abs(level - old) <= OFFER_RTOL * old
        ):
            sh.publish(flow, hop.i, level)
    link.mode = MODE_FREE


def _full_pass(sh: Sharer, link: Link, plain: bool) -> None:
    members = link.members
    caps = [hop.cap for hop in members.values()]
    arb = link.arbitration
    if arb is None or plain:
        shares = equal_waterfill(link.rate, caps)
    else:
        vls = tuple([flow.vl for flow in members])
        key = (link, vls, tuple(caps))
        memo = sh.memo
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= sh.memo_max:
                memo.clear()
            hit = memo[key] = allocate(link.rate, arb, vls, caps)
        shares = hit
    finite: list[float] = []
    cap_max = 0.0
    for c in caps:
        if c != INF:
            finite.append(c)
            if c > cap_max:  # noqa: PLR1730 - hot path: cheaper than a max() call
                cap_max = c
    link.fin_sum = fsum(finite)  # re-anchor the running aggregates exactly
    link.cap_max = cap_max
    touched = sh.touched
    for k, (flow, hop) in enumerate(members.items()):
        cap = caps[k]
        share = shares[k]
        # `_grant(flow, hop, share, offer)`, inlined
        offer = share if share < cap * _BOTTLENECK else INF
        if hop.alloc != share:
            hop.alloc = share
            if not flow.in_touched:
                flow.in_touched = True
                touched.append(flow)
        old = hop.offer
        if offer != old and not (
            offer < INF and old < INF and abs(offer - old) <= OFFER_RTOL * old
        ):
            sh.publish(flow, hop.i, offer)
    link.mode = MODE_FULL


def fair_share(link: Link) -> float:
    return link.rate / float(len(link.members))  # float / float: a native division


def by_fair_share(hops: tuple[Link, ...]) -> list[Link] | tuple[Link, ...]:
    """`sorted(hops, key=fair_share)`, by hand for the common two and three hops (a stable
    insertion sort: equal shares keep their order), where the call and its key list cost
    more than the comparisons in a compiled build."""
    n = len(hops)
    if n == 2:
        a, b = hops
        return hops if fair_share(a) <= fair_share(b) else (b, a)
    if n != 3:
        return sorted(hops, key=fair_share)
    a, b, c = hops
    fa, fb, fc = fair_share(a), fair_share(b), fair_share(c)
    if fb < fa:
        a, b, fa, fb = b, a, fb, fa
    if fc < fb:
        if fc < fa:
            return (c, a, b)
        return (a, c, b)
    return (a, b, c)
