"""Simple policies that exercise the core: FIFO + round robin (or random) assignment with a
fixed or shortest-queue read path. The paper's own scheduler is a separate module."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

from dualpath.engines.request import EngineState, NodeState, ReadPath, Request
from dualpath.policies.base import Limits, SchedulingPolicy


class RoundRobin(SchedulingPolicy):
    """FIFO queue; engines in turn; a PE with more than β unfinished tokens is skipped and
    a DE must have the HBM for the whole request. Path: shorter storage read queue."""

    name = "rr-shorter"
    description = "FIFO + round robin; read on the side with the shorter read queue"

    def __init__(self, limits: Limits, seed: int) -> None:
        super().__init__(limits, seed)
        self._next_pe = 0
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
        while queue:
            ok = [e.tok <= self.limits.beta for e in engines]
            i = self._pick(engines, self._next_pe, ok)
            if i is None:
                break
            req = queue.popleft()
            engines[i].tok += req.prompt - req.est_hit
            self._next_pe = i + 1
            out.append((req, engines[i]))
        return out

    def assign_decode_groups(
        self, queue: deque[Request], groups: Sequence[Sequence[EngineState]]
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
            need = private[0].length * self.limits.kv_bytes_per_token
            ok = [e.free_hbm >= need for e in engines]
            i = self._pick(engines, self._next_de.get(key, 0), ok)
            if i is None:
                break
            req = private.popleft()
            engines[i].free_hbm -= need
            engines[i].tok += req.length
            self._next_de[key] = i + 1
            out.append((req, engines[i]))
        return out


class RoundRobinPE(RoundRobin):
    name = "rr-pe"
    description = "FIFO + round robin; always read on the PE side (single path)"
    dual_path = False


class RoundRobinDE(RoundRobin):
    name = "rr-de"
    description = "FIFO + round robin; always read on the DE side"

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        return ReadPath.DE


class Basic(RoundRobinPE):
    name = "basic"
    description = "paper baseline: PE reads only, no layerwise prefill, round robin"
    layerwise = False


class RandomAssign(RoundRobin):
    """Like round robin, but the engine is drawn at random among the eligible ones."""

    name = "random"
    description = "FIFO + random engine among eligible; shorter read queue path"

    def __init__(self, limits: Limits, seed: int) -> None:
        super().__init__(limits, seed)
        self._rng = random.Random(seed)

    def _pick(self, engines: Sequence[EngineState], start: int, ok: list[bool]) -> int | None:
        eligible = [i for i, good in enumerate(ok) if good]
        return self._rng.choice(eligible) if eligible else None


POLICIES: tuple[type[SchedulingPolicy], ...] = (
    RoundRobin,
    RoundRobinPE,
    RoundRobinDE,
    Basic,
    RandomAssign,
)
