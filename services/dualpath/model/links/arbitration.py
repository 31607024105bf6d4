"""Pure bandwidth-sharing rules for one link: processor sharing and InfiniBand VL arbitration.

Nothing here knows about time or asyncio: given a link capacity and the flows on it (their
virtual lane and the most they could use, i.e. what other hops leave them), `allocate` returns
each flow's share. The fabric calls it whenever a link's flow set changes; tests call it
directly (hypothesis). See docs/links.md for the mapping to the paper's OpenSM settings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

INF: Final = math.inf
UNBOUNDED_HIGH_LIMIT: Final = 255
# IBA counts `high_limit` in 4 KB units whatever the MTU, and table weights in 64-byte credits
# (a fluid share needs only the weights' ratios, so no credit size here).
HIGH_LIMIT_UNIT_BYTES: Final = 4096
MAX_DATA_VL: Final = 14
_MAX_WEIGHT: Final = 255


def _frozen_table(name: str, table: Mapping[int, int]) -> Mapping[int, int]:
    """Validate an arbitration table and drop weight-0 entries (IBA: weight 0 = skip)."""
    clean: dict[int, int] = {}
    for vl, weight in table.items():
        if not 0 <= vl <= MAX_DATA_VL:
            raise ValueError(f"{name} table: VL {vl} is not a data VL (0..{MAX_DATA_VL})")
        if not 0 <= weight <= _MAX_WEIGHT:
            raise ValueError(f"{name} table: VL {vl} weight {weight} outside 0..{_MAX_WEIGHT}")
        if weight > 0:
            clean[vl] = weight
    return MappingProxyType(clean)


@dataclass(frozen=True)
class VlArbitration:
    """IB VL arbitration of one port, configured like OpenSM (`qos_vlarb_high/low`, limit).

    `high`/`low`: VL -> weight in 64-byte credits (0 = not in that table). `high_limit`: 4 KB
    units of high-table traffic before the low table gets one packet; 255 = unbounded (strict
    priority, low VLs starve while high ones are backlogged). `isolation=False` is the "no QoS"
    baseline: every flow on the link shares equally regardless of VL.
    `high_vls_in_low_table=True` is the IBA rule: a VL listed in both tables is also served by
    the low table (this reproduces the reference closed forms: VL2 ~0.1 % against VL0, ~0.04 %
    against VL0/1/3). False makes the two tables disjoint classes (VL2 floor ~0.41 %).
    """

    high: Mapping[int, int]
    low: Mapping[int, int]
    high_limit: int = 240
    mtu_bytes: int = 4096
    isolation: bool = True
    high_vls_in_low_table: bool = True
    # Derived once so the per-event hot path does no table arithmetic.
    high_fraction: float = field(init=False, repr=False, compare=False)
    low_effective: Mapping[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.high_limit <= UNBOUNDED_HIGH_LIMIT:
            raise ValueError(f"high_limit {self.high_limit} outside 0..{UNBOUNDED_HIGH_LIMIT}")
        if self.mtu_bytes <= 0:
            raise ValueError(f"mtu_bytes must be > 0, got {self.mtu_bytes}")
        high = _frozen_table("high", self.high)
        low = _frozen_table("low", self.low)
        if not high and not low:
            raise ValueError("VL arbitration needs at least one VL with a non-zero weight")
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high_fraction", _high_fraction(self.high_limit, self.mtu_bytes))
        eff = low if self.high_vls_in_low_table else {v: w for v, w in low.items() if v not in high}
        object.__setattr__(self, "low_effective", MappingProxyType(dict(eff)))

    def __hash__(self) -> int:
        return hash(
            (
                tuple(sorted(self.high.items())),
                tuple(sorted(self.low.items())),
                self.high_limit,
                self.mtu_bytes,
                self.isolation,
                self.high_vls_in_low_table,
            )
        )

    def serves(self, vl: int) -> bool:
        """Whether traffic on `vl` can be sent at all (a VL in neither table never is)."""
        return not self.isolation or vl in self.high or vl in self.low_effective

    @classmethod
    def from_opensm(
        cls,
        high: str,
        low: str,
        high_limit: int = 240,
        *,
        mtu_bytes: int = 4096,
        isolation: bool = True,
        high_vls_in_low_table: bool = True,
    ) -> VlArbitration:
        """Build from OpenSM strings such as `qos_vlarb_high 0:192,1:192,2:0,3:192`."""
        return cls(
            _parse_table(high),
            _parse_table(low),
            high_limit,
            mtu_bytes,
            isolation,
            high_vls_in_low_table,
        )


def _parse_table(text: str) -> dict[int, int]:
    """'0:192,1:192' -> {0: 192, 1: 192}; repeated VLs add up (a VL may own several entries)."""
    table: dict[int, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        vl_text, sep, weight_text = entry.partition(":")
        if not sep:
            raise ValueError(f"bad VL arbitration entry {entry!r}: expected 'vl:weight'")
        vl = int(vl_text)
        table[vl] = min(_MAX_WEIGHT, table.get(vl, 0) + int(weight_text))
    return table


def paper_cnic_arbitration(isolation: bool = True) -> VlArbitration:
    """The DualPath CNIC setting (paper §5.1/A.1): model traffic on VL0/1/3, KV on VL2."""
    return VlArbitration(
        high={0: 192, 1: 192, 2: 0, 3: 192},
        low={0: 192, 1: 192, 2: 64, 3: 192},
        high_limit=240,
        mtu_bytes=4096,
        isolation=isolation,
    )


def _high_fraction(high_limit: int, mtu_bytes: int) -> float:
    """Share of the wire the high table gets while both tables have backlogged VLs.

    Per round the high table may send high_limit x 4 KB (limit 0 still lets one packet go),
    then the low table sends one packet.
    """
    if high_limit >= UNBOUNDED_HIGH_LIMIT:
        return 1.0
    high_bytes = max(high_limit * HIGH_LIMIT_UNIT_BYTES, mtu_bytes)
    return high_bytes / (high_bytes + mtu_bytes)


def equal_waterfill(budget: float, caps: list[float]) -> list[float]:
    """Processor sharing with demand caps: equal shares, unused share goes to the others."""
    n = len(caps)
    if n == 0:
        return []
    share = budget / n
    low = caps[0]  # min(caps) by hand: the one-argument `min` is a generic call compiled
    for k in range(1, n):
        cap = caps[k]
        if cap < low:  # noqa: PLR1730 - hot path: cheaper than a min() call
            low = cap
    if low >= share:  # the common case: nobody is limited elsewhere
        return [share] * n
    # `weighted_waterfill(budget, [1.0] * n, caps)` with the unit weights taken out: x / 1.0
    # and x * 1.0 are x, and n ones sum to float(n) exactly, so every float is the same.
    out = [0.0] * n
    if n == 2:  # the stable sort of two, without the call and its key list
        order = [1, 0] if caps[1] < caps[0] else [0, 1]
    else:
        order = sorted(range(n), key=caps.__getitem__)
    remaining = budget if budget > 0.0 else 0.0
    left = float(n)
    for pos, i in enumerate(order):
        level = remaining / left if left > 0 else 0.0
        cap = caps[i]
        if cap <= level:
            out[i] = cap
            remaining = remaining - cap if remaining - cap > 0.0 else 0.0
            left -= 1.0
            continue
        for j in order[pos:]:
            out[j] = level
        break
    return out


def weighted_waterfill(
    budget: float, weights: Sequence[float], caps: Sequence[float]
) -> list[float]:
    """Max-min fair split of `budget` in proportion to `weights`, never above `caps`."""
    n = len(caps)
    out = [0.0] * n
    # (Loops and a list's `__getitem__` as the sort key rather than a lambda, `sum` and
    # `max`: each of those is a generic call in a compiled build. Same floats: `sum` of
    # floats adds them in order from 0.0, and `max(0.0, x)` is `x if x > 0.0 else 0.0`.)
    ratios = [caps[i] / weights[i] for i in range(n)]
    order = sorted(range(n), key=ratios.__getitem__)
    remaining = budget if budget > 0.0 else 0.0
    weight_left = 0.0
    for w in weights:
        weight_left += w
    for pos, i in enumerate(order):
        level = remaining / weight_left if weight_left > 0 else 0.0
        cap = caps[i]
        if cap <= level * weights[i]:
            out[i] = cap
            rest = remaining - cap
            remaining = rest if rest > 0.0 else 0.0
            weight_left -= weights[i]
            continue
        for j in order[pos:]:
            out[j] = level * weights[j]
        break
    return out


def _serve_table(
    table: Mapping[int, int], budget: float, demand: dict[int, float], got: dict[int, float]
) -> None:
    """One arbitration-table pass: split `budget` by weight among VLs still wanting more."""
    vls: list[int] = []
    caps: list[float] = []
    weights: list[float] = []
    for vl, want in demand.items():
        if vl in table and want - got[vl] > 0:
            vls.append(vl)
            caps.append(want - got[vl])
            weights.append(float(table[vl]))
    if not vls or budget <= 0:
        return
    shares = weighted_waterfill(budget, weights, caps)
    for k in range(len(vls)):
        got[vls[k]] += shares[k]


def _total(got: dict[int, float]) -> float:
    """`sum(got.values())`: the same additions, in order from 0.0, without the generic call."""
    total = 0.0
    for v in got.values():
        total += v
    return total


def vl_allocation(
    arb: VlArbitration, capacity: float, demand: Mapping[int, float]
) -> dict[int, float]:
    """Split `capacity` among VLs (isolation ON) given each VL's demand (INF = backlogged).

    Work-conserving two-table arbitration: the high table gets `high_fraction` while the low
    table also has demand, the low table the rest; whatever one table leaves unused goes to the
    other. Within a table VLs share by weight (fluid WRR).
    """
    wanted = dict(demand)
    got = {vl: 0.0 for vl in wanted}
    high, low = arb.high, arb.low_effective
    wants_high = wants_low = False
    for vl, d in wanted.items():
        if d > 0:
            wants_high = wants_high or vl in high
            wants_low = wants_low or vl in low
    high_budget = capacity * arb.high_fraction if wants_low else capacity
    _serve_table(high, high_budget, wanted, got)
    _serve_table(low, capacity - _total(got), wanted, got)
    if wants_high:  # the low table may have left bandwidth unused: high takes it back
        _serve_table(high, capacity - _total(got), wanted, got)
    return got


def saturated_shares(arb: VlArbitration | None, backlogged: Iterable[int]) -> dict[int, float]:
    """Fraction of the link each VL gets when all `backlogged` VLs are saturated.

    With isolation OFF (or no arbitration) sharing is per flow; this assumes one flow per VL.
    """
    vls = list(dict.fromkeys(backlogged))
    if arb is None or not arb.isolation:
        return {vl: 1.0 / len(vls) for vl in vls}
    return vl_allocation(arb, 1.0, {vl: INF for vl in vls})


def allocate(
    capacity: float, arb: VlArbitration | None, vls: Sequence[int], caps: list[float]
) -> list[float]:
    """Share of each flow on one link. `vls[i]`/`caps[i]`: flow i's VL and the most it can use.

    Flows of one VL share that VL's allocation equally; the VL allocation follows `arb`.
    """
    if arb is None or not arb.isolation:
        return equal_waterfill(capacity, caps)
    groups: dict[int, list[int]] = {}
    for i, vl in enumerate(vls):
        groups.setdefault(vl, []).append(i)
    if len(groups) == 1:  # a lone VL gets the whole link: the arbiter is work-conserving
        return equal_waterfill(capacity, caps)
    demand = {vl: math.fsum([caps[i] for i in members]) for vl, members in groups.items()}
    per_vl = vl_allocation(arb, capacity, demand)
    out = [0.0] * len(caps)
    for vl, members in groups.items():
        shares = equal_waterfill(per_vl[vl], [caps[i] for i in members])
        for k in range(len(members)):
            out[members[k]] = shares[k]
    return out
