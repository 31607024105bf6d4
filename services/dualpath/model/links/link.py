"""`Link` (one direction of a bandwidth resource) and `Flow` (one transfer across links).

Both are plain slotted records; the `Fabric` owns all the logic that changes them, so a million
flows cost little memory and every state change happens in one place.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple

from dualpath.model.links.arbitration import MAX_DATA_VL, VlArbitration
from dualpath.model.links.stats import new_series, series_until, spread

if TYPE_CHECKING:
    from dualpath.model.links.fabric import Fabric

INF: Final = math.inf
ACTIVE: Final = 0
DONE: Final = 1
CANCELLED: Final = 2


class LinkCounters(NamedTuple):
    """A link's statistics as plain data, as `Link.counters` reads them: what lets a link
    charged in one process be reported by another (model/links/snapshot.py)."""

    bytes_total: float
    busy_s: float
    bytes_by_vl: dict[int, float]
    series: list[float]  # bytes per bucket from t = 0 (empty: the fabric keeps no series)


class Link:
    """One direction of a resource with a rate in bytes/s (a NIC direction, a DRAM, a store).

    A half-duplex resource (host DRAM) is ONE link that both reads and writes cross.
    Statistics read between events extrapolate the current rates to the fabric's `now()`.
    """

    __slots__ = (
        "_bucket_s",
        "_busy_s",
        "_bytes",
        "_cur_b",
        "_cur_v",
        "_fabric",
        "_series",
        "_width",
        "arbitration",
        "cap_max",
        "cover",
        "cover_sum",
        "dirty",
        "fin_sum",
        "inert",
        "inf_members",
        "members",
        "mode",
        "name",
        "order",
        "pending",
        "plain",
        "rate",
        "t_last",
        "total_rate",
        "uncovered",
        "vl_bytes",
        "vl_count",
        "vls",
        "vls_served",
    )

    def __init__(
        self,
        fabric: Fabric,
        name: str,
        rate_bps: float,
        arbitration: VlArbitration | None,
        bucket_s: float | None,
    ) -> None:
        if not rate_bps > 0 or math.isinf(rate_bps):
            raise ValueError(f"link {name!r}: rate must be a finite number > 0, got {rate_bps}")
        self._fabric = fabric
        self.name = name
        self.rate = float(rate_bps)
        self.arbitration = arbitration
        # Plain processor sharing (no VL arbitration in effect): enables the level fast path.
        self.plain = arbitration is None or not arbitration.isolation
        # VLs a flow may use here (None = any): `arbitration.serves` precomputed for start().
        self.vls_served: frozenset[int] | None = (
            None
            if self.plain or arbitration is None
            else frozenset(vl for vl in range(MAX_DATA_VL + 1) if arbitration.serves(vl))
        )
        # flow -> its hop here (`Hop`: the index in flow.hops and the share state; a dict:
        # O(1) removal, deterministic order)
        self.members: dict[Flow, Hop] = {}
        self.total_rate = 0.0
        # Member flows per VL, and how many VLs have any (a list by VL: cheaper than a dict
        # for the count every join and leave updates).
        self.vl_count = [0] * (MAX_DATA_VL + 1)
        self.vls = 0
        # Share-computation state, owned by sharing.Sharer: running aggregates of the members'
        # caps (INF caps kept apart), members whose cap changed, the last pass's regime.
        self.dirty = False
        # Both map a flow to its hop here, as `members` does: a pass over either
        # needs it, and a second lookup in `members` would cost a hash per flow.
        self.inf_members: dict[Flow, Hop] = {}
        self.pending: dict[Flow, Hop] = {}
        self.fin_sum = 0.0
        self.cap_max = 0.0
        self.mode = 0
        # Left out of re-shares while its flows' covers cannot fill it (model/links/cover.py):
        # cover link -> flows it covers here, the covers' rates summed, flows without one.
        self.inert = False
        self.cover: dict[Link, int] = {}
        self.cover_sum = 0.0
        self.uncovered = 0
        self.order = 0  # creation index: ranks links of equal rate (set by the fabric)
        # Accounting, integrated up to t_last (inline rather than a helper object: hot path).
        self.t_last = 0.0
        self._bytes = 0.0
        self._busy_s = 0.0
        # Bytes per VL of the flows that have left (the fabric charges a flow's moved bytes
        # to each hop when it leaves); the flows on the link add their progress when read.
        # Charged per flow rather than integrated per rate segment: every settle and rate
        # change would otherwise pay a per-VL rate table (docs/links.md, "Approximations
        # and limits").
        self.vl_bytes = [0.0] * (MAX_DATA_VL + 1)
        self._bucket_s = bucket_s
        self._series = new_series(bucket_s)
        self._width = bucket_s or 1.0  # a native float for settle (bucket_s is optional)
        # The series' current bucket, held in a register while segments land in it: bucket
        # `_cur_b`'s true value is `_cur_v` (the array's entry is stale until `_park`).
        # An array store from compiled code goes through argument parsing, and almost every
        # settle lands in the bucket the one before it did. Same additions, same order.
        self._cur_b = -1
        self._cur_v = 0.0

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.rate:.4g} B/s, flows={len(self.members)})"

    def settle(self, t: float) -> None:
        """Close the constant-rate segment ending at `t` (call before any rate/member change)."""
        t0 = self.t_last
        dt = t - t0
        if dt <= 0.0:
            return
        self.t_last = t
        if not self.members:
            return
        self._busy_s += dt
        rate = self.total_rate
        if rate <= 0.0:
            return
        self._bytes += rate * dt
        series = self._series
        if series is not None:
            width = self._width
            bucket = int(t0 / width)
            if bucket == self._cur_b and bucket == int(t / width):  # the usual case
                self._cur_v += rate * dt
                return
            self._park()
            if bucket == int(t / width) and bucket < len(series):
                series[bucket] += rate * dt
            else:
                spread(series, width, t0, t, rate)
                bucket = int(t / width)
            self._cur_b = bucket
            self._cur_v = series[bucket]

    def _park(self) -> None:
        """Write the register back into the series (before the series is read or moved)."""
        if self._cur_b >= 0:
            series = self._series
            assert series is not None
            series[self._cur_b] = self._cur_v
            self._cur_b = -1

    # --- statistics ----------------------------------------------------------------------

    def counters(self) -> LinkCounters:
        """The link's statistics up to now."""
        series = self.series() if self._series is not None else []
        return LinkCounters(self.bytes_total, self.busy_s, self.bytes_by_vl, series)

    def restore(self, counters: LinkCounters, skip_s: float = 0.0) -> None:
        """Load `counters` into this idle link, dropping the first `skip_s` emulated seconds
        of its series (the process runtime's clocks start before the workload does)."""
        if self.members:
            raise ValueError(f"link {self.name!r} has flows: restore only into an idle link")
        self._bytes = counters.bytes_total
        self._busy_s = counters.busy_s
        by_vl = [0.0] * (MAX_DATA_VL + 1)
        for vl, nbytes in counters.bytes_by_vl.items():
            if not 0 <= vl <= MAX_DATA_VL:
                raise ValueError(f"link {self.name!r}: VL {vl} is not a data VL (0..{MAX_DATA_VL})")
            by_vl[vl] = float(nbytes)
        self.vl_bytes = by_vl
        if self._series is not None and self._bucket_s:
            skip = int(skip_s / self._bucket_s)
            self._cur_b = -1
            self._series = array("d", counters.series[skip:])

    def _open_dt(self) -> float:
        """Length of the still-open segment, if any flow is on the link."""
        return max(0.0, self._fabric.now() - self.t_last) if self.members else 0.0

    @property
    def bytes_total(self) -> float:
        return self._bytes + self.total_rate * self._open_dt()

    @property
    def bytes_by_vl(self) -> dict[int, float]:
        """Bytes per VL up to now: the flows that left, plus what the flows on it moved."""
        out = {vl: b for vl, b in enumerate(self.vl_bytes) if b > 0.0}
        now = self._fabric.now()
        for flow in self.members:
            if flow.state == ACTIVE:
                moved = flow.nbytes - max(0.0, flow.left - flow._rate * (now - flow.t_last))
                if moved > 0.0:
                    out[flow.vl] = out.get(flow.vl, 0.0) + moved
        return out

    @property
    def busy_s(self) -> float:
        """Emulated seconds during which at least one flow was on the link."""
        return self._busy_s + self._open_dt()

    @property
    def active_flows(self) -> int:
        return len(self.members)

    def utilization(self, elapsed_s: float) -> float:
        """Mean fraction of the rate used over [0, elapsed_s]."""
        if elapsed_s <= 0:
            raise ValueError(f"elapsed_s must be > 0, got {elapsed_s}")
        return self.bytes_total / (self.rate * elapsed_s)

    def series(self, bucket_s: float | None = None) -> list[float]:
        """Bytes moved per bucket from t=0 to now (default: the fabric's bucket width)."""
        if self._series is None or self._bucket_s is None:
            raise ValueError("time series disabled: construct the Fabric with bucket_s")
        now = self._fabric.now()
        rate = self.total_rate if self.members else 0.0
        self._park()
        return series_until(self._series, self._bucket_s, bucket_s, (self.t_last, now, rate))


class Hop:
    """A flow's share state on one of its links, owned by sharing.Sharer: the share the link
    grants it (`alloc`), the link's offer (its share if it limits the flow, else INF) and the
    flow's cap there (the minimum of its other hops' offers). `i` is the link's index in
    `flow.hops`.

    Fields of one object per hop rather than three lists of floats per flow: in a compiled
    build a field holds a native double, where a list holds a boxed float that every write
    allocates and every read unboxes (docs/native-history.md, stop 47). No reference to the flow or
    the link, so a finished flow is freed by reference counting, not by the cyclic collector.
    """

    __slots__ = ("alloc", "cap", "i", "offer")

    def __init__(self, i: int) -> None:
        self.i = i
        self.alloc = 0.0
        self.offer = INF
        self.cap = INF

    def __repr__(self) -> str:
        return f"Hop({self.i}, alloc={self.alloc:.4g}, offer={self.offer:.4g}, cap={self.cap:.4g})"


class Flow:
    """A transfer of `nbytes` across `hops` at once (cut-through), on virtual lane `vl`.

    Its rate is the minimum of its shares on its hops; every hop is charged every byte.
    """

    __slots__ = (
        "_fabric",
        "_rate",
        "covers",
        "eps",
        "finished_at",
        "heap_pos",
        "heap_seq",
        "heap_t",
        "hops",
        "in_touched",
        "left",
        "legs",
        "nbytes",
        "on_done",
        "started_at",
        "state",
        "t_last",
        "vl",
    )

    def __init__(
        self,
        fabric: Fabric,
        nbytes: float,
        hops: tuple[Link, ...],
        vl: int,
        *,
        on_done: Callable[[], None] | None,
        t: float,
    ) -> None:
        self._fabric = fabric
        self.nbytes = nbytes
        self.hops = hops
        self.vl = vl
        self.on_done = on_done
        self.started_at = t
        self.finished_at: float | None = None
        self.state = ACTIVE
        self._rate = 0.0  # the fabric's own field; `rate` reads it after any owed re-share
        self.left = nbytes  # bytes still to move as of t_last
        self.t_last = t
        # A flow within this many bytes of the end is done: avoids float-drift stragglers.
        self.eps = 1e-9 * nbytes
        self.heap_t = INF  # time of this flow's live completion-heap entry
        self.heap_seq = 0  # and its push number (ties: first pushed, first out)
        self.heap_pos = -1  # its index in an `IndexedQueue` (-1: not queued there)
        self.in_touched = False  # listed in the sharer's `touched` (its shares changed)
        # Per hop: its share state. Written out for the usual one to three hops: a list
        # comprehension is a nested function call in pure Python (3.11), per flow.
        n = len(hops)
        if n == 1:
            self.legs = [Hop(0)]
        elif n == 2:
            self.legs = [Hop(0), Hop(1)]
        elif n == 3:
            self.legs = [Hop(0), Hop(1), Hop(2)]
        else:
            self.legs = [Hop(i) for i in range(n)]
        self.covers: list[Link] | None = None  # per hop: its cover (cover.py), if counted

    def __repr__(self) -> str:
        names = ",".join(h.name for h in self.hops)
        return f"Flow({self.nbytes:.4g} B vl={self.vl} [{names}] rate={self._rate:.4g})"

    @property
    def rate(self) -> float:
        """Bytes/s now: the minimum of the flow's shares, after the re-share the fabric owes
        for starts deferred to the end of this instant (`Fabric.flush`)."""
        self._fabric.flush()
        return self._rate

    @property
    def done(self) -> bool:
        return self.state == DONE

    @property
    def cancelled(self) -> bool:
        return self.state == CANCELLED

    @property
    def remaining(self) -> float:
        """Bytes still to move, extrapolated to the fabric's current time."""
        if self.state != ACTIVE:
            return 0.0 if self.state == DONE else self.left
        fabric = self._fabric
        fabric.flush()
        elapsed = max(0.0, fabric.now() - self.t_last)
        return max(0.0, self.left - self._rate * elapsed)

    def cancel(self) -> None:
        """Stop the transfer; bytes already moved stay counted on every hop. Idempotent."""
        self._fabric.cancel(self)
