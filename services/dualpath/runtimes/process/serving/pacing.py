"""Real-payload pacing: the bytes `--real-payload SCALE` ships go at their links' rates.

Emulated time is paced by the fluid links; the real bytes that stand for a transfer are paced
here, by one token bucket per emulated link they cross (model/links/token_bucket.py), with strict
priority for the link's high-table VLs. The rate in real bytes per wall second is

    rate = line rate (emulated B / emulated s) x SCALE x dilation (emulated s / wall s)

so at `--speedup 2` twice as many emulated, hence real, bytes cross per wall second. Each
bucket holds one chunk plus `BURST_S` of tokens: a sender woken that late loses no rate
(the tc-tbf rule, burst >= rate/HZ), and the level is kept against the clock (an absolute
schedule), so early or late wake-ups never accumulate.

A send waits for its tokens *before* its bytes go. A unary message (a `Charge`, a persist)
is one send: it leaves as one burst once the link's earlier bytes are paid for (an idle link
sends at once, so an emulated transfer is not delayed), and its debt holds back the next.
A stream waits chunk by chunk (`chunks`), which spreads its bytes on the wire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dualpath.model.links.token_bucket import PriorityBuckets, TokenBucket
from dualpath.runtimes.process.serving import payload

if TYPE_CHECKING:
    from dualpath.model.links import Link

BURST_S = 0.05  # wall seconds of tokens beyond one chunk: the host wake-up jitter absorbed
EARLY_S = 0.0005  # a send due within this goes now: its small debt is repaid by the next


def paced_rate(line_rate: float, scale: float, dilation: float) -> float:
    """Real bytes per wall second of a link of `line_rate` emulated bytes per emulated s."""
    return line_rate * scale * dilation


@dataclass(frozen=True, slots=True)
class LinkPace:
    rate: float  # real bytes per wall second
    high_vls: frozenset[int] = frozenset()  # served first (the link's high arbitration table)


def link_paces(links: Mapping[str, Link], scale: float, dilation: float) -> dict[str, LinkPace]:
    """Every emulated link's pace; a CNIC's high VLs are its high table (under isolation)."""
    out: dict[str, LinkPace] = {}
    for name, ln in links.items():
        arb = ln.arbitration
        high = frozenset(arb.high) if arb is not None and arb.isolation else frozenset[int]()
        out[name] = LinkPace(paced_rate(ln.rate, scale, dilation), high)
    return out


class Wire:
    """The asyncio side of one link's `PriorityBuckets`: senders wait here for their turn.

    The head of the queue sleeps until its tokens are due; the others wait for a change
    (a grant, a cancel, an arrival that may outrank the head), then look again."""

    def __init__(self, buckets: PriorityBuckets, now: Callable[[], float]) -> None:
        self.buckets = buckets
        self._now = now
        self._changed = asyncio.Event()
        self.sends = 0
        self.bytes = 0.0
        self.wait_s = 0.0
        self.max_wait_s = 0.0

    async def send(self, vl: int, nbytes: float) -> float:
        """Wait until `nbytes` on `vl` may go; returns the seconds waited."""
        t0 = self._now()
        ticket = self.buckets.enqueue(vl, nbytes)
        self._wake()  # an arrival may outrank the head, which must look again
        granted = False
        try:
            while not granted:
                now = self._now()
                nxt = self.buckets.next_start(now)
                assert nxt is not None  # this send is queued
                head, start = nxt
                if head == ticket and start - now <= EARLY_S:
                    self.buckets.grant(ticket, now)
                    granted = True
                else:
                    await self._wait(start - now if head == ticket else None)
        finally:
            if not granted:
                self.buckets.cancel(ticket)
            self._wake()  # the next head computes its start
        waited = self._now() - t0
        self.sends += 1
        self.bytes += nbytes
        self.wait_s += waited
        self.max_wait_s = max(self.max_wait_s, waited)
        return waited

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, timeout: float | None) -> None:
        changed = self._changed
        loop = asyncio.get_running_loop()
        timer = None if timeout is None else loop.call_later(timeout, self._wake)
        try:
            await changed.wait()
        finally:
            if timer is not None:
                timer.cancel()


class Pacer:
    """One process's buckets, one per link it sends real bytes for (made on first use)."""

    def __init__(
        self,
        links: Mapping[str, LinkPace],
        chunk_bytes: int = payload.CHUNK_BYTES,
        burst_s: float = BURST_S,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        if chunk_bytes <= 0 or burst_s < 0:
            raise ValueError(f"pacer: chunk_bytes {chunk_bytes} must be > 0, burst_s >= 0")
        self.links = dict(links)
        self.chunk_bytes = chunk_bytes
        self.burst_s = burst_s
        self._now = now
        self._wires: dict[str, Wire] = {}

    def rate(self, link: str) -> float:
        return self._pace(link).rate

    def _pace(self, link: str) -> LinkPace:
        if link not in self.links:
            raise ValueError(f"pacer: no link {link!r} to pace on (known: {len(self.links)})")
        return self.links[link]

    def wire(self, link: str) -> Wire:
        w = self._wires.get(link)
        if w is None:
            pace = self._pace(link)
            burst = self.chunk_bytes + pace.rate * self.burst_s
            bucket = TokenBucket(pace.rate, burst, self._now())
            w = self._wires[link] = Wire(PriorityBuckets(bucket, pace.high_vls), self._now)
        return w

    def bottleneck(self, names: Sequence[str]) -> str:
        """The slowest of a transfer's links (the first of equals): the one it is paced on."""
        if not names:
            raise ValueError("pacer: a transfer with no link cannot be paced")
        return min(names, key=self.rate)

    async def pace(self, link: str, vl: int, nbytes: float) -> float:
        """One send of `nbytes` on `link`: returns once its tokens are there (seconds waited)."""
        if nbytes <= 0:
            return 0.0
        return await self.wire(link).send(vl, nbytes)

    async def chunks(self, link: str, vl: int, nbytes: int) -> AsyncIterator[int]:
        """A stream of `nbytes`: yields each chunk's size once the chunk may be sent."""
        left = nbytes
        while left > 0:
            n = min(left, self.chunk_bytes)
            await self.pace(link, vl, n)
            yield n
            left -= n

    def stats(self) -> dict[str, dict[str, float]]:
        return {
            name: {
                "rate_bps": self.links[name].rate * 8,
                "sends": w.sends,
                "bytes": w.bytes,
                "wait_s": w.wait_s,
                "max_wait_s": w.max_wait_s,
            }
            for name, w in self._wires.items()
        }


def node_pacer(links: Mapping[str, Link], scale: float, dilation: float) -> Pacer | None:
    """The pacer of a process shipping real payloads; None without them (`scale` 0)."""
    if scale <= 0:
        return None
    return Pacer(link_paces(links, scale, dilation))
