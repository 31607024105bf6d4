"""Links that provably cannot bind: the bookkeeping that lets a re-share leave them out.

A plain link L is *covered* when every flow on it also crosses a *cover* link c(f) ranked
below L (rank = (rate, creation order), a total order, so covers never form a cycle) and
the covers' rates sum to at most L's rate: then its flows together can never exceed L's
rate, whatever the rest of the fabric does, so L never limits anyone and the re-share skips
it (docs/links.md, "Links that cannot bind", has the proof). The covers are counted per
link as flows join and leave, so the test is O(1) per hop.
"""

from __future__ import annotations

import math
from typing import Final

from dualpath.model.links.link import Flow, Link

# Re-sum the covers exactly when the running sum is this close to the link's rate.
_RESUM_RTOL: Final = 1e-9
_STRICT: Final = 1.0 - 1e-9


def below(a: Link, b: Link) -> bool:
    """a ranks strictly below b: slower, or as fast and created earlier."""
    return a.rate < b.rate or (a.rate == b.rate and a.order < b.order)


def pick(link: Link, hops: tuple[Link, ...]) -> Link:
    """The hop of a flow that covers it on `link`: one already counted there if any (the
    covers' sum then does not grow), else the lowest-ranked; `link` itself if none ranks
    below it (the flow is uncovered there)."""
    if not link.plain:  # VL arbitration does not water-fill: such a link always shares
        return link
    counted = link.cover
    best = link
    for hop in hops:
        if hop is link or not below(hop, link):
            continue
        if hop in counted:
            return hop
        if best is link or below(hop, best):
            best = hop
    return best


def add(link: Link, cover: Link) -> None:
    if cover is link:
        link.uncovered += 1
        return
    counted = link.cover
    n = counted.get(cover, 0)
    if n == 0:
        link.cover_sum += cover.rate
    counted[cover] = n + 1


def remove(link: Link, cover: Link) -> None:
    if cover is link:
        link.uncovered -= 1
        return
    counted = link.cover
    n = counted[cover] - 1
    if n:
        counted[cover] = n
        return
    del counted[cover]
    link.cover_sum = link.cover_sum - cover.rate if counted else 0.0


def coverable(link: Link) -> bool:
    """Its flows' covers (all counted, none missing) cannot carry more than its rate."""
    if link.uncovered or not link.plain:
        return False
    total = link.cover_sum
    if abs(total - link.rate) <= _RESUM_RTOL * link.rate:  # re-anchor: no drift at the edge
        total = link.cover_sum = math.fsum(c.rate for c in link.cover)
    # Strictly below: then the link is never full, at any allocation the re-share may
    # settle on (with VL arbitration elsewhere there can be several), so it never binds.
    return total < link.rate * _STRICT


def clear(link: Link) -> None:
    """An idle link: nothing counted."""
    link.cover.clear()
    link.cover_sum = 0.0
    link.uncovered = 0
    link.inert = False


def join_covers(flow: Flow) -> None:
    """Count the flow's covers on each of its hops."""
    hops = flow.hops
    covers: list[Link] = []
    for link in hops:  # a pick reads only its own link's counts (hops are distinct links)
        cover = pick(link, hops)
        add(link, cover)
        covers.append(cover)
    flow.covers = covers
