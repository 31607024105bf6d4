"""Baselines on the host-DRAM KV tier (docs/tier.md): `hicache` and `dualpath+tier`.

`hicache` stands in for the paper's SGL(MC) (SGLang with HiCache and a Mooncake store,
§7.2): PE-side reads only, as Basic, with layerwise loading (HiCache overlaps its host ->
GPU loads with compute layer by layer), plus the tier and a cache-aware PE choice: a turn
goes back to a PE on the node whose DRAM holds the most of its session, when an engine
there is under β; else engines in turn, as Basic. DE choice: engines in turn, as Basic.

`dualpath+tier` is DualPath (Algorithm 1, the two-level DE choice) with one change: the
read side is the one whose storage read would end first counting what each side's DRAM
already holds, i.e. the smaller of `read_q + (hit - cached)` per side. With nothing cached
(or the tier off) both sides need the whole hit and this is DualPath's shorter-read-queue
rule, ties included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import SchedulingPolicy
from dualpath.model.policies.dualpath import DualPath
from dualpath.model.policies.simple import Layerwise


class HiCache(Layerwise):
    name = "hicache"
    description = "SGL(MC) stand-in: PE reads only, layerwise, DRAM tier, sticky PE per session"

    def sticky_pe(self, req: Request, engines: Sequence[EngineState]) -> EngineState | None:
        """The least-loaded engine under β on the node whose tier holds the most blocks of
        the request's session; None if no node holds any or that node's engines are full."""
        tier = self.tier
        if tier is None:
            return None
        best_node, best = "", 0
        for e in engines:
            n = tier.cached(req.session, e.node.name)
            if n > best:
                best_node, best = e.node.name, n
        pick: EngineState | None = None
        for e in engines:
            if e.node.name != best_node or e.tok > self.limits.beta:
                continue
            if pick is None or e.tok < pick.tok:
                pick = e
        return pick

    def assign_prefill(
        self, queue: deque[Request], engines: Sequence[EngineState]
    ) -> list[tuple[Request, EngineState]]:
        out: list[tuple[Request, EngineState]] = []
        key = engines[0].group if engines else 0
        while queue:
            engine = self.sticky_pe(queue[0], engines)
            if engine is None:
                ok = [e.tok <= self.limits.beta for e in engines]
                i = self._pick(engines, self._next_pe.get(key, 0), ok)
                if i is None:
                    break
                engine = engines[i]
                self._next_pe[key] = i + 1
            req = queue.popleft()
            self.take_prefill(req, engine)
            out.append((req, engine))
        return out


class DualPathTier(DualPath):
    name = "dualpath+tier"
    description = "DualPath; read side by read queue + the hit's part not in that node's DRAM"

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        tier = self.tier
        if tier is None or request.hit <= 0:
            return super().choose_path(request, pe_node, de_node)
        bt = tier.block_tokens
        hit = request.hit
        pe = pe_node.read_q + hit - min(hit, tier.cached(request.session, pe_node.name) * bt)
        de = de_node.read_q + hit - min(hit, tier.cached(request.session, de_node.name) * bt)
        if pe == de:
            return self.limits.path_tie
        return ReadPath.DE if de < pe else ReadPath.PE


POLICIES: tuple[type[SchedulingPolicy], ...] = (HiCache, DualPathTier)
