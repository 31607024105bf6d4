"""Completion times of active flows: a min-heap with lazy deletion (no asyncio, no clock).

Rates change on every start/finish nearby, so completion times move all the time. Instead of
cancelling timers, a flow keeps at most one *live* entry (`flow.heap_t`): an earlier finish
pushes a new entry and orphans the old one; a later finish keeps the old, earlier entry, which
on popping finds the flow unfinished and re-queues its true end. Orphans are skipped when they
surface, and the heap is rebuilt if they ever outnumber live entries by far.

Two implementations of one ordering. Entries are keyed by (completion time, push number),
unique keys, so any min-heap pops the same flows in the same order:
- `CompletionQueue`: tuples on `heapq`, the fastest in pure Python (heapq is C);
- `IndexedQueue`: the flows themselves, each at its `heap_pos`, moved in place when an earlier
  finish is pushed (no orphans, no tuple per push). Compiled (docs/native.md), its sift loops
  compare two native float fields where heapq compares tuples through generic rich
  comparisons; in pure Python its loops would be slower than heapq. `new_queue` picks.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush
from typing import Final

from dualpath.model.core.virtual_core import native
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


def new_queue() -> CompletionQueue:
    """The queue that is fastest for how this module runs (both pop the same order)."""
    return IndexedQueue() if native() else CompletionQueue()


def _before(a: Flow, b: Flow) -> bool:
    """Heap order: (heap_t, heap_seq), what the tuples compare in `CompletionQueue`."""
    ta, tb = a.heap_t, b.heap_t
    return ta < tb or (ta == tb and a.heap_seq < b.heap_seq)


class IndexedQueue(CompletionQueue):
    """The flows as their own heap entries: one each, at `flow.heap_pos` (-1: not queued).

    An earlier finish moves the flow up in place; a later one keeps its entry (re-queued when
    it surfaces, as in `CompletionQueue`). A cancelled flow stays until it surfaces."""

    __slots__ = ("_flows",)

    def __init__(self) -> None:
        super().__init__()
        self._flows: list[Flow] = []

    def push_if_earlier(self, flow: Flow, t_finish: float) -> None:
        if t_finish < flow.heap_t:
            flow.heap_t = t_finish
            seq = self._seq
            self._seq = seq + 1
            flow.heap_seq = seq
            pos = flow.heap_pos
            if pos < 0:
                pos = len(self._flows)
                self._flows.append(flow)
            self._sift_up(flow, pos)

    def next_time(self) -> float:
        flows = self._flows
        while flows:
            flow = flows[0]
            if flow.state == ACTIVE:
                return flow.heap_t
            self._pop()
        return INF

    def pop_due(self, t_ev: float) -> list[Flow]:
        flows, lim, batch = self._flows, t_ev + tolerance(t_ev), []
        while flows and flows[0].heap_t <= lim:
            flow = self._pop()
            if flow.state != ACTIVE:
                continue  # cancelled since it was queued
            flow.heap_t = INF
            rate = flow._rate
            if flow.left - rate * (t_ev - flow.t_last) <= flow.eps:
                batch.append(flow)
            elif rate > 0.0:  # slowed down since it was queued: queue its true end
                t_finish = flow.t_last + flow.left / rate
                if t_finish <= lim:
                    batch.append(flow)
                else:
                    self.push_if_earlier(flow, t_finish)
        return batch

    def compact_if_sparse(self, live: int) -> None:
        flows = self._flows
        if len(flows) > 4 * live + 1024:
            for flow in flows:
                flow.heap_pos = -1
            kept = [flow for flow in flows if flow.state == ACTIVE]
            self._flows = []
            for flow in kept:  # sifting each in keeps the heap property (O(n log n), rare)
                flow.heap_pos = len(self._flows)
                self._flows.append(flow)
                self._sift_up(flow, flow.heap_pos)

    def _pop(self) -> Flow:
        flows = self._flows
        top = flows[0]
        top.heap_pos = -1
        last = flows.pop()
        if flows:
            self._sift_down(last, 0)
        return top

    def _sift_up(self, flow: Flow, pos: int) -> None:
        flows = self._flows
        while pos > 0:
            parent_pos = (pos - 1) >> 1
            parent = flows[parent_pos]
            if not _before(flow, parent):
                break
            flows[pos] = parent
            parent.heap_pos = pos
            pos = parent_pos
        flows[pos] = flow
        flow.heap_pos = pos

    def _sift_down(self, flow: Flow, pos: int) -> None:
        flows = self._flows
        n = len(flows)
        child = 2 * pos + 1
        while child < n:
            right = child + 1
            if right < n and _before(flows[right], flows[child]):
                child = right
            smaller = flows[child]
            if not _before(smaller, flow):
                break
            flows[pos] = smaller
            smaller.heap_pos = pos
            pos = child
            child = 2 * pos + 1
        flows[pos] = flow
        flow.heap_pos = pos
