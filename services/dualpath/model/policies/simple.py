"""Load-oblivious baselines: FIFO + round robin (or random) engine choice.

These are the ablation steps of the paper's Fig. 12 (right) — `basic`, `layerwise`,
`dualpath-simple` — `basic-guarded` (Basic with DualPath's β guard and quota), plus two
plain references, `round_robin` and `random`, that ignore
load when choosing the read path too. The paper's own scheduler is `model/policies/dualpath.py`.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from collections.abc import Sequence

from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import (
    AttentionTime,
    BatchItem,
    Limits,
    SchedulingPolicy,
    quota_batch,
)


class DualPathSimple(SchedulingPolicy):
    """FIFO queue; engines in turn. A PE with more than β unfinished tokens is skipped (so
    requests wait in the global queue, not on one engine) and a DE must have the HBM for
    the whole request (physics, not policy). Path: the shorter storage read queue."""

    name = "dualpath-simple"
    description = "layerwise + dual path; round-robin engines, shorter-read-queue path"

    def __init__(self, limits: Limits, seed: int) -> None:
        super().__init__(limits, seed)
        self._next_pe: dict[int, int] = {}  # per PE group, like the DE cursors
        self._next_group = 0
        self._next_de: dict[int, int] = {}

    def _pick(self, engines: Sequence[EngineState], start: int, ok: list[bool]) -> int | None:
        n = len(engines)
        for k in range(n):
            i = (start + k) % n
            if ok[i]:
                return i
        return None

    def assign_prefill(
        self, queue: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        key = engines[0].group if engines else 0
        while queue:
            ok = [e.tok <= self.limits.beta for e in engines]
            i = self._pick(engines, self._next_pe.get(key, 0), ok)
            if i is None:
                break
            req = queue.popleft()
            self.take_prefill(req, engines[i])
            self._next_pe[key] = i + 1
            out.append((req, engines[i]))
        return out

    def assign_decode_groups(
        self,
        queue: deque[Request],
        groups: Sequence[Sequence[EngineState]],
        private: Sequence[deque[Request]],
    ) -> list[tuple[Request, int]]:
        out: list[tuple[Request, int]] = []
        while queue:
            out.append((queue.popleft(), self._next_group % len(groups)))
            self._next_group += 1
        return out

    def assign_decode(
        self, private: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        key = engines[0].group if engines else 0
        while private:
            ok = [self.decode_fits(private[0], e) for e in engines]
            i = self._pick(engines, self._next_de.get(key, 0), ok)
            if i is None:
                break
            req = private.popleft()
            self.take_decode(req, engines[i])
            self._next_de[key] = i + 1
            out.append((req, engines[i]))
        return out


class Layerwise(DualPathSimple):
    name = "layerwise"
    description = "Basic + layerwise prefill; PE reads only, round robin"
    dual_path = False


class BasicGuarded(Layerwise):
    """The paper's Basic with DualPath's β guard and compute quota added (the `basic` of
    issue 12's audit): PE reads only, no layerwise prefill, round robin."""

    name = "basic-guarded"
    description = "Basic + DualPath's β guard and compute quota: PE reads, no layerwise, RR"
    layerwise = False


class Basic(BasicGuarded):
    """The paper's Basic (§7.2: no layerwise prefill, no dual-path loading, "no scheduler";
    A.4 gives the compute quota to DualPath and Oracle only): round robin without a β guard
    (engines in turn, whatever they hold), and a forward packs FIFO until its whole prompt
    KV no longer fits in HBM. The PE-side DRAM read buffer stays: reading straight into HBM
    is not modelled (docs/fidelity.md)."""

    name = "basic"
    description = "paper baseline: PE reads only, no layerwise, round robin, no β guard/quota"
    beta_guard = False
    compute_quota = False

    def assign_prefill(
        self, queue: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        key = engines[0].group if engines else 0
        while queue and engines:
            i = self._next_pe.get(key, 0) % len(engines)
            req = queue.popleft()
            self.take_prefill(req, engines[i])
            self._next_pe[key] = i + 1
            out.append((req, engines[i]))
        return out

    def form_batch(
        self,
        ready: deque[Request],
        attention_time: AttentionTime,
        hbm_free: float | None,
    ) -> list[BatchItem]:
        """FIFO-pack with no compute quota: until the HBM (or the running cap) is full."""
        unbounded = dataclasses.replace(self.limits, compute_quota_s=math.inf)
        return quota_batch(ready, attention_time, unbounded, hbm_free)


class DeOnly(DualPathSimple):
    name = "de-only"
    description = "layerwise; round robin; always read on the DE side (exercises that path)"

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        return ReadPath.DE


class RoundRobin(DualPathSimple):
    """Round robin everywhere: engines in turn and the read path alternating PE, DE, ...
    — no load signal at all (the β and HBM guards stay: they are capacity, not load)."""

    name = "round_robin"
    description = "layerwise + dual path; round-robin engines and alternating read path"

    def __init__(self, limits: Limits, seed: int) -> None:
        super().__init__(limits, seed)
        self._next_path = 0

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        self._next_path ^= 1
        return ReadPath.PE if self._next_path else ReadPath.DE


class RandomAssign(DualPathSimple):
    """Engines drawn at random among the eligible ones, read path by a coin flip."""

    name = "random"
    description = "layerwise + dual path; random eligible engine, random read path"

    def __init__(self, limits: Limits, seed: int) -> None:
        super().__init__(limits, seed)
        self._rng = random.Random(seed)

    def _pick(self, engines: Sequence[EngineState], start: int, ok: list[bool]) -> int | None:
        eligible = [i for i, good in enumerate(ok) if good]
        return self._rng.choice(eligible) if eligible else None

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        return ReadPath.PE if self._rng.random() < 0.5 else ReadPath.DE


POLICIES: tuple[type[SchedulingPolicy], ...] = (
    Basic,
    BasicGuarded,
    Layerwise,
    DualPathSimple,
    RoundRobin,
    RandomAssign,
    DeOnly,
)
