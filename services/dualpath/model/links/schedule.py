"""Completion times of active flows: a min-heap with lazy deletion (no asyncio, no clock).

Rates change on every start/finish nearby, so completion times move all the time. Instead of
cancelling timers, a flow keeps at most one *live* entry (`flow.heap_t`): an earlier finish
pushes a new entry and orphans the old one; a later finish keeps the old, earlier entry, which
on popping finds the flow unfinished and re-queues its true end. Orphans are skipped when they
surface, and the heap is rebuilt if they ever outnumber live entries by far.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush
from typing import Final

from dualpath.model.links.link import ACTIVE, Flow

INF: Final = math.inf


def tolerance(t: float) -> float:
    """Completion-time tolerance: a few thousand ulps of t, so equal flows finish together."""
    return 1e-12 * (1.0 + abs(t))


class CompletionQueue:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Flow]] = []
        # Tie-break: never compare flows, keep FIFO order. A native int, not
        # `itertools.count()`, whose `next` was a generic call in a compiled build.
        self._seq = 0

    def push_if_earlier(self, flow: Flow, t_finish: float) -> None:
        if t_finish < flow.heap_t:
            flow.heap_t = t_finish
            seq = self._seq
            self._seq = seq + 1
            heappush(self._heap, (t_finish, seq, flow))

    def next_time(self) -> float:
        """Earliest live completion time (INF if none); drops orphans found on top."""
        heap = self._heap
        while heap:
            t, _, flow = heap[0]
            if flow.heap_t == t and flow.state == ACTIVE:
                return t
            heappop(heap)
        return INF

    def pop_due(self, t_ev: float) -> list[Flow]:
        """Flows finished by t_ev (within tolerance); unfinished ones are re-queued."""
        heap, lim, batch = self._heap, t_ev + tolerance(t_ev), []
        while heap and heap[0][0] <= lim:
            te, _, flow = heappop(heap)
            if flow.heap_t != te or flow.state != ACTIVE:
                continue  # orphaned by an earlier entry, or the flow is gone
            flow.heap_t = INF
            rate = flow._rate
            if flow.left - rate * (t_ev - flow.t_last) <= flow.eps:
                batch.append(flow)
            elif rate > 0.0:  # slowed down since this entry was pushed: queue its true end
                t_finish = flow.t_last + flow.left / rate
                if t_finish <= lim:
                    batch.append(flow)
                else:
                    flow.heap_t = t_finish
                    seq = self._seq
                    self._seq = seq + 1
                    heappush(heap, (t_finish, seq, flow))
        return batch

    def compact_if_sparse(self, live: int) -> None:
        heap = self._heap
        if len(heap) > 4 * live + 1024:
            self._heap = [e for e in heap if e[2].heap_t == e[0] and e[2].state == ACTIVE]
            heapify(self._heap)
