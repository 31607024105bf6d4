"""Pure policy decisions: FIFO + round robin, β cap, HBM fit, read path, compute quota."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

import pytest

from dualpath.model.entities.request import EngineState, NodeState, ReadPath, Request
from dualpath.model.policies.base import Limits, quota_batch
from dualpath.model.policies.registry import UnknownPolicyError, default_registry

LIMITS = Limits(alpha=1000, beta=1000, compute_quota_s=0.3, kv_bytes_per_token=10)


def _req(
    rid: int, prompt: int = 100, gen: int = 10, loop: asyncio.AbstractEventLoop | None = None
) -> Request:
    fut: asyncio.Future[None] = (loop or asyncio.new_event_loop()).create_future()
    return Request(rid=rid, session=rid, turn=0, prompt=prompt, gen=gen, arrival=0.0, done=fut)


def _engines(n: int, free_hbm: float = 1e9) -> list[EngineState]:
    node = NodeState("n0", "prefill", 0)
    return [EngineState(f"e{i}", i, node, 0, i, free_hbm=free_hbm) for i in range(n)]


def test_round_robin_spreads_and_respects_beta() -> None:
    policy = default_registry().create("dualpath-simple", LIMITS, 0)
    loop = asyncio.new_event_loop()
    queue = deque(_req(i, prompt=600, loop=loop) for i in range(6))
    engines = _engines(2)
    got = policy.assign_prefill(queue, engines)
    # 600 tokens each: e0 takes 0 and 2 (tok 1200 > beta after the second), e1 takes 1 and 3.
    assert [(r.rid, e.engine_id) for r, e in got] == [(0, "e0"), (1, "e1"), (2, "e0"), (3, "e1")]
    assert [r.rid for r in queue] == [4, 5]  # the rest stays queued, FIFO kept
    loop.close()


def test_decode_assignment_needs_hbm() -> None:
    policy = default_registry().create("dualpath-simple", LIMITS, 0)
    loop = asyncio.new_event_loop()
    private = deque([_req(0, prompt=90, gen=10, loop=loop), _req(1, prompt=90, gen=10, loop=loop)])
    engines = _engines(1, free_hbm=1500.0)  # one request needs 100 tokens x 10 B = 1000 B
    got = policy.assign_decode(private, engines)
    assert [r.rid for r, _ in got] == [0]
    assert engines[0].free_hbm == pytest.approx(500.0)
    assert len(private) == 1
    loop.close()


def test_read_path_choices() -> None:
    reg = default_registry()
    pe_node, de_node = (
        NodeState("p", "prefill", 0, read_q=10),
        NodeState("d", "decode", 0, read_q=5),
    )
    loop = asyncio.new_event_loop()
    req = _req(0, loop=loop)
    assert (
        reg.create("dualpath-simple", LIMITS, 0).choose_path(req, pe_node, de_node) is ReadPath.DE
    )
    assert reg.create("layerwise", LIMITS, 0).choose_path(req, pe_node, de_node) is ReadPath.PE
    assert reg.create("de-only", LIMITS, 0).choose_path(req, pe_node, de_node) is ReadPath.DE
    de_node.read_q = 10  # tie -> DE side (policy.path_tie default)
    assert (
        reg.create("dualpath-simple", LIMITS, 0).choose_path(req, pe_node, de_node) is ReadPath.DE
    )
    assert reg.create("layerwise", LIMITS, 0).choose_path(req, pe_node, de_node) is ReadPath.PE
    assert reg.create("basic", LIMITS, 0).layerwise is False
    loop.close()


def _attention(batch: Sequence[tuple[int, int]]) -> float:
    return sum(n * 0.001 for _, n in batch)  # 1 ms per new token


def test_quota_batch_chunks_the_overflowing_request() -> None:
    loop = asyncio.new_event_loop()
    ready = deque(
        [_req(0, prompt=200, loop=loop), _req(1, prompt=200, loop=loop), _req(2, loop=loop)]
    )
    batch = quota_batch(ready, _attention, LIMITS, None)
    assert [(i.request.rid, i.new_tokens) for i in batch] == [(0, 200), (1, 100)]
    assert [r.rid for r in ready] == [1, 2]  # the chunked request stays at the head
    loop.close()


def test_quota_batch_respects_hbm_in_non_layerwise_mode() -> None:
    loop = asyncio.new_event_loop()
    ready = deque([_req(0, prompt=50, loop=loop), _req(1, prompt=50, loop=loop)])
    batch = quota_batch(ready, _attention, LIMITS, hbm_free=700.0)  # 70 tokens of KV
    assert [(i.request.rid, i.new_tokens) for i in batch] == [(0, 50), (1, 20)]
    loop.close()


def test_unknown_policy_names_the_accepted_values() -> None:
    with pytest.raises(UnknownPolicyError, match=r"accepted: .*dualpath-simple"):
        default_registry().get("nope")
