"""The DualPath scheduler (paper §6.1, Algorithm 1) and its Oracle upper bound.

PE choice: engines over β get nothing; the head request goes to the min-`tok_e` PE whose
node's read queue is short (`read_q ≤ α`), else to the min-`tok_e` PE with a long queue;
when neither exists the fetch returns and the rest stays queued (FIFO kept).
DE choice: drain the global queue to the least-loaded group, then inside the group use the
Z threshold to balance tokens and request counts among DEs with the HBM for the request.
Read path and intra-engine batching: the base class (shorter read queue; compute quota).

Tie-breaks the paper leaves open: among PEs with equal `tok_e` the one whose node has the
shorter read queue (so idle engines do not all fill the first node), then the lowest engine
index; among DEs the lowest index. `read_q` is the snapshot taken when the group fetched:
it is not refreshed inside one fetch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dualpath.compiled import mypyc_attr
from dualpath.model.entities.queue import TokenQueue
from dualpath.model.entities.request import EngineState, Request
from dualpath.model.policies.base import SchedulingPolicy


@mypyc_attr(allow_interpreted_subclasses=True)
class DualPath(SchedulingPolicy):
    name = "dualpath"
    description = "full DualPath: layerwise, dual path, α/β PE choice, Z-threshold DE choice"

    # --- PE scheduling (Algorithm 1) -------------------------------------------------------
    def pick_prefill(self, engines: Sequence[EngineState]) -> EngineState | None:
        """Category 2 (short read queue) before category 3 (long); overloaded never. Within
        a category the least (tok_e, read_q, index). One pass without building lists: this
        runs for every request over every PE of its group."""
        lim = self.limits
        beta, alpha = lim.beta, lim.alpha
        short: EngineState | None = None
        long: EngineState | None = None
        for e in as_list(engines):
            if e.tok > beta:
                continue
            if e.node.read_q <= alpha:
                if short is None or _before(e, short):
                    short = e
            elif short is None and (long is None or _before(e, long)):
                long = e
        return short if short is not None else long

    def assign_prefill(
        self, queue: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        while queue:
            engine = self.pick_prefill(engines)
            if engine is None:
                break  # back to the leader; the rest of the queue keeps its order
            req = queue.popleft()
            self.take_prefill(req, engine)
            out.append((req, engine))
        return out

    # --- DE scheduling, level 1: across groups ----------------------------------------------
    def assign_decode_groups(
        self,
        queue: deque[Request],
        groups: Sequence[Sequence[EngineState]],
        private: Sequence[deque[Request]],
    ) -> list[tuple[Request, int]]:
        """Drain the whole global queue, each request to the group with the smallest total
        tok_e. A group's total also counts requests already waiting in its private queue
        (they are its tokens-to-be; the paper updates totals after each assignment)."""
        load = [_tok(g) + _queued(p) for g, p in zip(groups, private, strict=True)]
        out: list[tuple[Request, int]] = []
        n = len(load)
        while queue:
            req = queue.popleft()
            # min by (load, index) without a tuple per group: this runs for every request
            # over every DE group (24 at 48P96D)
            gi, least = 0, load[0]
            for i in range(1, n):
                if load[i] < least:
                    gi, least = i, load[i]
            load[gi] += req.length
            out.append((req, gi))
        return out

    # --- DE scheduling, level 2: within a group ---------------------------------------------
    def high_token_threshold(
        self, private: Sequence[Request], engines: Sequence[EngineState]
    ) -> float:
        """Z = factor × (Σ_{r∈R} len_r + Σ_e tok_e) / |E|, R = the queue head that fits the
        group's total free HBM if there were no fragmentation. Computed once per fetch."""
        kv = self.limits.kv_bytes_per_token
        free = 0.0
        for e in as_list(engines):  # Σ max(0, free_hbm) in order, as `sum` added it
            free += e.free_hbm if e.free_hbm > 0.0 else 0.0
        fit_tokens = 0
        for r in private:
            if (fit_tokens + r.length) * kv > free:
                break
            fit_tokens += r.length
        total = fit_tokens + _tok(engines)
        return self.limits.z_factor * total / len(engines)

    def pick_decode(
        self, req: Request, engines: Sequence[EngineState], z: float
    ) -> EngineState | None:
        """Among DEs with the HBM: the fewest requests among those staying under Z (balance
        request counts), else the fewest tokens (least HBM/preemption risk); lowest index
        on ties. One pass: this runs for every request over every DE of its group."""
        # The base class's HBM test inlined unless a subclass redefines it, and (seq, index)
        # compared without building tuples: this loop was the scheduler's largest frame
        # with 128 DEs in a group.
        inline = type(self).decode_fits is SchedulingPolicy.decode_fits
        fits = None if inline and not self.limits.max_running_decode else self.decode_fits
        length = req.length
        need = length * self.limits.kv_bytes_per_token
        low: EngineState | None = None
        low_seq = 0
        high: EngineState | None = None
        for e in as_list(engines):
            if (e.free_hbm < need) if fits is None else not fits(req, e):
                continue
            if e.tok + length <= z:
                seq = e.seq
                if low is None or seq < low_seq or (seq == low_seq and e.index < low.index):
                    low, low_seq = e, seq
            elif low is None and (
                high is None or e.tok < high.tok or (e.tok == high.tok and e.index < high.index)
            ):
                high = e
        return low if low is not None else high

    def assign_decode(
        self, private: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        if not engines or not private:
            return out
        z = self.high_token_threshold(private, engines)
        while private:
            engine = self.pick_decode(private[0], engines, z)
            if engine is None:
                break  # no DE has the HBM for the head request: return to the leader
            req = private.popleft()
            self.take_decode(req, engine)
            out.append((req, engine))
        return out


def _before(a: EngineState, b: EngineState) -> bool:
    """(tok_e, read_q, index) of `a` below that of `b`, without building the tuples."""
    if a.tok != b.tok:
        return a.tok < b.tok
    qa, qb = a.node.read_q, b.node.read_q
    if qa != qb:
        return qa < qb
    return a.index < b.index


def _tok(engines: Sequence[EngineState]) -> int:
    """Σ tok_e over a group (a loop, not a generator: cheaper compiled)."""
    group = as_list(engines)
    if group:
        load = group[0].load
        if load is not None and len(group) == load.size:  # the whole group: kept
            return load.tok
    total = 0  # a group's live part (nodes down), or engines built without a group
    for e in group:
        total += e.tok
    return total


def as_list(engines: Sequence[EngineState]) -> list[EngineState]:
    """The engines as a list (they are one already, from the scheduler): a loop over a
    `Sequence` is a generic iteration in a compiled build, one over a list is native, and
    these loops visit every engine of a group (32 a DE group of a 2P4D unit) per fetch."""
    return engines if isinstance(engines, list) else list(engines)


def _queued(private: deque[Request]) -> int:
    """Σ len_r over a private queue: kept by the queue when it can (O(1) at paper scale)."""
    if isinstance(private, TokenQueue):
        return private.tokens
    return sum(r.length for r in private)


class Oracle(DualPath):
    """DualPath with every storage read, H2D/D2H copy and PE↔DE KV transfer taking zero
    time (paper §7.2): the upper bound with no KV-cache I/O cost. Compute, the expert
    all-to-all and HBM/DRAM capacities are unchanged."""

    name = "oracle"
    description = "DualPath scheduling with zero-time KV I/O (upper bound)"
    oracle = True


POLICIES: tuple[type[SchedulingPolicy], ...] = (DualPath, Oracle)
