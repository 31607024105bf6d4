"""The scheduling-policy seam (paper §6): what a policy decides and what it is shown.

A policy is pure: it reads queues and engine states and returns assignments; the
scheduler shell applies them. Four decisions:

1. `assign_prefill` — when a PE group fetches: which queued requests go to which of its PEs
   (global FIFO queue; unassigned requests stay queued in order).
2. `assign_decode_groups` / `assign_decode` — the two-level DE choice: global DE queue ->
   a DE group's private queue, then private queue -> a DE with the HBM for it.
3. `choose_path` — once a request has its PE and DE: read its KV on the PE or DE side.
4. `form_batch` — intra-engine: which ready requests (and how many new tokens of each)
   one PE puts in its next forward batch.

Class flags say which engine features the policy runs with (the paper's baselines and
ablation steps, docs/scheduling.md "Shipped").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from dualpath.compiled import mypyc_attr
from dualpath.model.blocks.tier import TierSet
from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request

# (cached_tokens, new_tokens) pairs of a batch -> predicted attention time, seconds.
AttentionTime = Callable[[Sequence[tuple[int, int]]], float]


@dataclass(frozen=True, slots=True)
class Limits:
    """Scheduler constants derived from the hardware/model profile (paper A.4)."""

    alpha: int  # tokens a node's SNIC reads in alpha_s seconds
    beta: int  # tokens one GPU processes in beta_s seconds
    compute_quota_s: float  # PE attention-time cap per forward (300 ms)
    kv_bytes_per_token: int  # all layers, for HBM fits
    z_factor: float = 1.05  # DE high-token threshold factor (paper §6.1, unexplained there)
    path_tie: ReadPath = ReadPath.DE  # read side when both read queues are equal
    # Running-request caps (settings engine.max_running_prefill/_decode; 0 = no cap): requests
    # per prefill forward, requests resident on one decode GPU.
    max_running_prefill: int = 0
    max_running_decode: int = 0


class BatchItem:
    """One request's part of a prefill forward. A plain class, not a frozen dataclass: its
    __init__ then compiles with the engines (a dataclass's runs interpreted, once a turn)."""

    __slots__ = ("new_tokens", "request")

    def __init__(self, request: Request, new_tokens: int) -> None:
        self.request: Final = request
        # prompt tokens computed in this forward (< the miss when chunked)
        self.new_tokens: Final = new_tokens

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchItem):
            return NotImplemented
        return self.request == other.request and self.new_tokens == other.new_tokens

    def __hash__(self) -> int:
        return hash((self.request, self.new_tokens))

    def __repr__(self) -> str:
        return f"BatchItem(request={self.request!r}, new_tokens={self.new_tokens})"


@mypyc_attr(allow_interpreted_subclasses=True)
class SchedulingPolicy(ABC):
    """Base class; subclasses register under `name` in the policy registry."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    layerwise: ClassVar[bool] = True  # layerwise prefill (False: whole prompt KV in HBM)
    dual_path: ClassVar[bool] = True  # may read on the DE side
    oracle: ClassVar[bool] = False  # all KV I/O takes zero time
    beta_guard: ClassVar[bool] = True  # never assigns to a PE holding more than β tokens
    # a forward's attention stays within the quota (a policy without one overrides form_batch)
    compute_quota: ClassVar[bool] = True

    def __init__(self, limits: Limits, seed: int) -> None:
        self.limits = limits
        self.seed = seed
        # The nodes' DRAM tier, read-only here (docs/tier.md): the composition root sets it
        # when the tier is on, so tier-aware policies can see which node holds a session.
        self.tier: TierSet | None = None

    @abstractmethod
    def assign_prefill(
        self, queue: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        """Pop requests from the head of `queue` and give each to one of `engines`."""

    @abstractmethod
    def assign_decode_groups(
        self,
        queue: deque[Request],
        groups: Sequence[Sequence[EngineState]],
        private: Sequence[deque[Request]],
    ) -> list[tuple[Request, int]]:
        """Drain `queue` into DE groups; returns (request, group index) pairs. `private`
        holds each group's requests not yet on a DE (read-only here)."""

    @abstractmethod
    def assign_decode(
        self, private: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        """Pop requests from a group's private queue onto DEs with enough free HBM."""

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        """Read on the side whose node has the shorter storage read queue (paper §6.1).

        Tie (the paper does not say): `policy.path_tie`, DE by default. Below saturation the
        queues are mostly both empty, so the tie decides most reads: on the PE side every
        read would land on the (fewer) PE nodes' SNICs; see docs/scheduling.md.
        """
        if not self.dual_path:
            return ReadPath.PE
        if de_node.read_q == pe_node.read_q:
            return self.limits.path_tie
        return ReadPath.DE if de_node.read_q < pe_node.read_q else ReadPath.PE

    # --- what an assignment does to the reported state -----------------------------------
    # Policies call these so that later choices in the same fetch see the update (the
    # paper updates tok_e after each assignment); the scheduler shell reverses them when
    # the request leaves the engine.
    def take_prefill(self, req: Request, engine: EngineState) -> None:
        tokens = prefill_tokens(req)
        engine.tok += tokens
        engine.seq += 1
        if engine.load is not None:
            engine.load.tok += tokens

    def take_decode(self, req: Request, engine: EngineState) -> None:
        engine.free_hbm -= req.length * self.limits.kv_bytes_per_token
        engine.tok += req.length
        engine.seq += 1
        if engine.load is not None:
            engine.load.tok += req.length

    def decode_fits(self, req: Request, engine: EngineState) -> bool:
        cap = self.limits.max_running_decode
        if cap and engine.seq >= cap:
            return False
        return engine.free_hbm >= req.length * self.limits.kv_bytes_per_token

    def form_batch(
        self,
        ready: deque[Request],
        attention_time: AttentionTime,
        hbm_free: float | None,
    ) -> list[BatchItem]:
        """FIFO-pack under the compute quota; chunk the request that would overflow.

        `hbm_free` is None for layerwise prefill (only one layer's KV is ever in HBM);
        otherwise the whole prompt KV of every batched request must fit (Basic).
        """
        return quota_batch(ready, attention_time, self.limits, hbm_free)


def release_prefill(req: Request) -> None:
    """Undo `take_prefill` when the PE finishes the request's prefill."""
    pe = req.pe
    assert pe is not None
    tokens = prefill_tokens(req)
    pe.tok -= tokens
    pe.seq -= 1
    if pe.load is not None:
        pe.load.tok -= tokens


def release_decode(req: Request) -> None:
    """Undo `take_decode` when the request's last token is generated."""
    de = req.de
    assert de is not None
    de.free_hbm += req.hbm_bytes
    de.tok -= req.length
    de.seq -= 1
    if de.load is not None:
        de.load.tok -= req.length


def prefill_tokens(req: Request) -> int:
    """A request's weight in a PE's tok_e: all its prompt tokens. The paper's tok_e is "the
    total tokens of those requests", the single proxy for GPU, disk and network load: the
    cached part is read through a SNIC and attended to, the new part is computed. β is
    derived in the same unit (runtime.cluster.derive_limits)."""
    return req.prompt


def _within_quota(t: float, limits: Limits) -> bool:
    return t <= limits.compute_quota_s * (1 + 1e-9)  # float sums must not lose a token


def _fits_hbm(items: list[tuple[int, int]], kv_per_token: int, hbm_free: float | None) -> bool:
    if hbm_free is None:
        return True
    return sum(c + n for c, n in items) * kv_per_token <= hbm_free


def quota_batch(
    ready: deque[Request], attention_time: AttentionTime, limits: Limits, hbm_free: float | None
) -> list[BatchItem]:
    """Paper §6.2: add requests FIFO while predicted attention time <= quota; binary-search
    the largest chunk of the overflowing request that still fits, then close the batch."""
    shapes: list[tuple[int, int]] = []
    batch: list[BatchItem] = []
    cap = limits.max_running_prefill or len(ready)
    while ready and len(batch) < cap:
        req = ready[0]
        remaining = req.prompt - req.computed
        if remaining <= 0:  # nothing left to compute (cannot happen: hits stop at prompt - 1)
            ready.popleft()
            continue
        trial = [*shapes, (req.computed, remaining)]
        if _within_quota(attention_time(trial), limits) and _fits_hbm(
            trial, limits.kv_bytes_per_token, hbm_free
        ):
            ready.popleft()
            shapes.append((req.computed, remaining))
            batch.append(BatchItem(req, remaining))
            continue
        chunk = _largest_chunk(shapes, req, remaining, attention_time, limits, hbm_free)
        if chunk == 0 and not batch:
            chunk = 1  # always make progress, even if one token busts the quota
        if chunk > 0:
            if chunk == remaining:
                ready.popleft()
            batch.append(BatchItem(req, chunk))
        break
    return batch


def _largest_chunk(
    shapes: list[tuple[int, int]],
    req: Request,
    remaining: int,
    attention_time: AttentionTime,
    limits: Limits,
    hbm_free: float | None,
) -> int:
    lo, hi = 0, remaining
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trial = [*shapes, (req.computed, mid)]
        if _within_quota(attention_time(trial), limits) and _fits_hbm(
            trial, limits.kv_bytes_per_token, hbm_free
        ):
            lo = mid
        else:
            hi = mid - 1
    return lo
