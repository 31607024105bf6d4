"""The two completion queues (schedule.py) pop the same flows in the same order.

The compiled build runs `IndexedQueue`, pure Python `CompletionQueue`; the native test
compares whole reports of the two, this compares the queues themselves, operation by operation.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.links import Fabric, Flow
from dualpath.model.links.link import ACTIVE, CANCELLED
from dualpath.model.links.schedule import CompletionQueue, IndexedQueue, new_queue

N_FLOWS = 12

# (op, flow, time, rate): push a finish time, pop what is due, cancel, or compact.
op_st = st.tuples(
    st.sampled_from(["push", "push", "push", "pop", "next", "cancel", "compact"]),
    st.integers(0, N_FLOWS - 1),
    st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.5, 5.0]),  # repeated times: ties
    st.sampled_from([0.0, 0.5, 1.0, 4.0]),
)


def _flows(fabric: Fabric) -> list[Flow]:
    return [Flow(fabric, 10.0, (), 0, on_done=None, t=0.0) for _ in range(N_FLOWS)]


def _run(
    queue: CompletionQueue, flows: list[Flow], ops: list[tuple[str, int, float, float]]
) -> list[object]:
    seen: list[object] = []
    for op, k, t, rate in ops:
        flow = flows[k]
        if op == "push" and flow.state == ACTIVE:
            flow._rate, flow.left, flow.t_last = rate, rate * t, 0.0
            queue.push_if_earlier(flow, t)
        elif op == "pop":
            seen.append([flows.index(f) for f in queue.pop_due(t)])
        elif op == "next":
            seen.append(queue.next_time())
        elif op == "cancel":
            flow.state = CANCELLED
        else:
            queue.compact_if_sparse(0)
        seen.append(queue.next_time())
    return seen


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op_st, max_size=60))
def test_indexed_queue_pops_what_the_tuple_heap_pops(
    ops: list[tuple[str, int, float, float]],
) -> None:
    fabric = Fabric(VirtualCore(), bucket_s=None)
    tuple_flows, indexed_flows = _flows(fabric), _flows(fabric)
    expected = _run(CompletionQueue(), tuple_flows, ops)
    assert _run(IndexedQueue(), indexed_flows, ops) == expected
    assert [f.heap_t for f in indexed_flows] == [f.heap_t for f in tuple_flows]


def test_a_slowed_flow_is_requeued_at_its_true_end() -> None:
    """A flow queued at t=1 that slowed to half its rate is not due at 1: it comes back at 2."""
    fabric = Fabric(VirtualCore(), bucket_s=None)
    for queue in (CompletionQueue(), IndexedQueue()):
        flow = Flow(fabric, 10.0, (), 0, on_done=None, t=0.0)
        flow._rate, flow.left = 10.0, 10.0
        queue.push_if_earlier(flow, 1.0)
        flow._rate = 5.0
        assert queue.pop_due(1.0) == []
        assert queue.next_time() == 2.0
        assert queue.pop_due(2.0) == [flow]
        assert queue.next_time() == float("inf")


def test_pure_python_uses_the_tuple_heap() -> None:
    """heapq is C; the indexed queue's sift loops only pay off compiled."""
    assert type(new_queue()) is CompletionQueue
