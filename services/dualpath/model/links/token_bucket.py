"""Token buckets: the packet-level shaper behind the fluid links, with strict VL priority.

A bucket (rate r, burst b) holds up to b tokens (bytes) and gains r per second. A send of
n bytes may start once the bucket holds n tokens (a full bucket when n > b: the send then
leaves it in debt, which later sends repay), and takes them. Over any interval T a
backlogged sender thus moves at most b + r·T bytes. With b = one frame and sends of one
frame each, frame k starts at exactly (k-1)·b/r and ends, on a wire of rate r, at k·b/r: the
completion time of k·b bytes in the fluid model, so `Link`'s fluid rate is the exact limit
of this bucket (docs/links.md, "Token buckets").

`PriorityBuckets` serves one link's bucket to its VLs in strict priority: a queued send of a
high VL (the link's high arbitration table) is always served before any low one, non-
preemptively (a granted send is on the wire), FIFO within a class. One bucket for both
classes, not one per class: the two classes together never exceed the link's rate.

Pure model: no I/O, no asyncio; time is a value the caller passes in (seconds, any clock).
runtimes/process/serving/pacing.py is its asyncio shell.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HIGH, LOW = 0, 1  # class ranks: lower is served first


def _positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"token bucket: {name} must be a finite number > 0, got {value}")
    return float(value)


class TokenBucket:
    """Tokens (bytes) accrue at `rate` per second up to `burst`; it starts full at `now`."""

    __slots__ = ("_t", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, now: float = 0.0) -> None:
        self.rate = _positive("rate (bytes/s)", rate)
        self.burst = _positive("burst (bytes)", burst)
        self._tokens = self.burst
        self._t = now

    def level(self, now: float) -> float:
        """Tokens held at `now` (negative while earlier sends are still being repaid)."""
        return min(self.burst, self._tokens + self.rate * max(0.0, now - self._t))

    def delay(self, nbytes: float, now: float) -> float:
        """Seconds from `now` until a send of `nbytes` may start."""
        short = min(nbytes, self.burst) - self.level(now)
        return short / self.rate if short > 0 else 0.0

    def take(self, nbytes: float, now: float) -> None:
        """A send of `nbytes` starts at `now`: debit them (the level may go below zero)."""
        self._tokens = self.level(now) - nbytes
        self._t = max(self._t, now)


@dataclass(slots=True)
class Send:
    ticket: int
    vl: int
    nbytes: float


class PriorityBuckets:
    """One link's bucket served to its VLs in strict priority (high table first)."""

    __slots__ = ("_queues", "_tickets", "bucket", "high_vls")

    def __init__(self, bucket: TokenBucket, high_vls: Iterable[int] = ()) -> None:
        self.bucket = bucket
        self.high_vls = frozenset(high_vls)
        self._queues: tuple[deque[Send], deque[Send]] = (deque(), deque())
        self._tickets = 0

    def rank(self, vl: int) -> int:
        return HIGH if vl in self.high_vls else LOW

    def enqueue(self, vl: int, nbytes: float) -> int:
        """Queue a send; returns its ticket."""
        self._tickets += 1
        self._queues[self.rank(vl)].append(Send(self._tickets, vl, nbytes))
        return self._tickets

    def cancel(self, ticket: int) -> None:
        for q in self._queues:
            for s in q:
                if s.ticket == ticket:
                    q.remove(s)
                    return

    def head(self) -> Send | None:
        """The send served next: the oldest of the highest non-empty class."""
        for q in self._queues:
            if q:
                return q[0]
        return None

    def waiting(self) -> int:
        return sum(len(q) for q in self._queues)

    def next_start(self, now: float) -> tuple[int, float] | None:
        """(ticket, time) of the next send to go, if nothing of higher rank arrives first."""
        head = self.head()
        if head is None:
            return None
        return head.ticket, now + self.bucket.delay(head.nbytes, now)

    def grant(self, ticket: int, now: float) -> None:
        """The head send goes at `now` (the caller waited for `next_start`)."""
        head = self.head()
        if head is None or head.ticket != ticket:
            raise ValueError(f"grant: ticket {ticket} is not the head of the queue")
        self._queues[self.rank(head.vl)].popleft()
        self.bucket.take(head.nbytes, now)


def schedule(sends: Sequence[tuple[float, int, float]], link: PriorityBuckets) -> list[float]:
    """Start time of each send (arrival time, VL, bytes) through `link`, replayed as
    discrete events: the reference behaviour the asyncio shell follows. An arrival at the
    instant a send would start is queued first (a high VL arriving then goes first)."""
    order = sorted(range(len(sends)), key=lambda i: sends[i][0])
    starts = [math.nan] * len(sends)
    by_ticket: dict[int, int] = {}
    t, k = (sends[order[0]][0] if order else 0.0), 0
    while k < len(order) or link.waiting():
        while k < len(order) and sends[order[k]][0] <= t:
            _, vl, nbytes = sends[order[k]]
            by_ticket[link.enqueue(vl, nbytes)] = order[k]
            k += 1
        nxt = link.next_start(t)
        if nxt is None:
            t = sends[order[k]][0]
            continue
        ticket, start = nxt
        if k < len(order) and sends[order[k]][0] <= start:
            t = sends[order[k]][0]  # an arrival before the head's start may outrank it
            continue
        link.grant(ticket, start)
        starts[by_ticket.pop(ticket)] = t = start
    return starts
