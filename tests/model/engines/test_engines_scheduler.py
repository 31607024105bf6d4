"""model/engines/scheduler.py: group leaders fetch periodically (skipping the polls where nothing
changed is equivalent), several engine groups share the work, placement skips nodes that
are down, and a request no decode GPU could ever hold fails at once, naming the setting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dualpath.model.core.clock import VirtualClock
from dualpath.model.core.virtual_core import VirtualCore
from dualpath.model.engines.capacity import CapacityError, CapacityPool
from dualpath.model.engines.cluster import Cluster
from dualpath.model.engines.fetches import GroupFetches
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.entities.request import NodeState, Request
from dualpath.runtimes.cluster import build_cluster
from dualpath.runtimes.virtual.sim import (
    make_workload,
    run_offline,
    run_virtual_loop,
    simulate,
    start_cluster,
)
from tests.runtimes.virtual.conftest import small


@pytest.mark.parametrize("policy", ["dualpath", "dualpath-simple"])
def test_periodic_polls_match_on_change_fetches(policy: str) -> None:
    on_change = simulate(small(f"policy.name={policy}", "engine.fetch_mode=on-change"))
    periodic = simulate(small(f"policy.name={policy}", "engine.fetch_mode=periodic"))
    assert periodic["requests"]["completed"] == on_change["requests"]["completed"]
    # A poll at the instant a persist lands may see its blocks or not, as events of one
    # instant run in either order (the virtual core's FIFO, not asyncio's heap): a block.
    blocks = (periodic["integrity"]["blocks_read"], on_change["integrity"]["blocks_read"])
    assert blocks[0] == pytest.approx(blocks[1], rel=1e-4)
    assert periodic["jct_s"] == pytest.approx(on_change["jct_s"], rel=0.02)
    ttft = (periodic["latency"]["ttft_s"]["mean"], on_change["latency"]["ttft_s"]["mean"])
    # A poll waits up to one interval (5 ms) for a request that on-change fetches at once.
    assert abs(ttft[0] - ttft[1]) <= 0.005 + 0.05 * ttft[1]


def test_several_engine_groups_per_side_share_the_work() -> None:
    """Two DE groups (one node each) and two PE groups: the level-1 DE choice and the PE
    fetches of both groups spread the agents over every node."""
    r = simulate(
        small(
            "topology.prefill_nodes=2",
            "topology.decode_nodes=2",
            "topology.prefill_group_nodes=1",
            "topology.decode_group_nodes=1",
            agents=12,
        )
    )
    per_node = r["snic"]["per_node"]
    persisted = {n: s["bytes_written"] for n, s in per_node.items() if n.startswith("decode")}
    assert len(persisted) == 2 and min(persisted.values()) > 0.25 * max(persisted.values())
    read = {n: s["bytes_read"] for n, s in per_node.items() if n.startswith("prefill")}
    assert len(read) == 2 and min(read.values()) > 0  # both PE groups were given requests
    assert r["integrity"]["conservation_ok"]


@pytest.mark.parametrize("mode", ["per-forward", "on-change", "periodic"])
def test_pe_groups_share_the_arrivals_evenly(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three PE groups fetch from one FIFO queue: none is always first (least loaded first;
    periodic leaders out of phase), so each gets about a third of the requests. Always
    group 0 first gave it 94 % of them at 4P8D."""
    per_group: dict[int, int] = {}
    fetch = GlobalScheduler._fetch_prefill

    def counting(self: GlobalScheduler, g: int) -> None:
        before = len(self.pe_queue)
        fetch(self, g)
        per_group[g] = per_group.get(g, 0) + before - len(self.pe_queue)

    monkeypatch.setattr(GlobalScheduler, "_fetch_prefill", counting)
    r = simulate(
        small(
            "topology.prefill_nodes=3",
            "topology.prefill_group_nodes=1",
            f"engine.fetch_mode={mode}",
            agents=24,
        )
    )
    total = r["requests"]["completed"]
    assert sum(per_group.values()) == total and len(per_group) == 3
    assert min(per_group.values()) > 0.2 * total, per_group


def test_placement_skips_a_node_that_is_down() -> None:
    sc = small("topology.decode_nodes=2", agents=4)
    workload = make_workload(sc)
    placed: list[str] = []

    def recording(receive: Callable[[Request], None]) -> Callable[[Request], None]:
        def record(req: Request) -> None:
            assert req.de is not None
            placed.append(req.de.node.name)
            receive(req)

        return record

    def setup(cluster: Cluster) -> None:
        cluster.scheduler.down.add("decode1")  # lost: nothing more is placed there
        for unit in cluster.decode_units:
            unit.receive = recording(unit.receive)  # type: ignore[method-assign,assignment]

    run_offline(sc, setup=setup)
    assert len(placed) == sum(len(s.turns) for s in workload.scripts) > 0
    assert set(placed) == {"decode0"}


def test_a_request_no_decode_gpu_can_hold_fails_at_once() -> None:
    sc = small()
    workload = make_workload(sc)

    cluster = start_cluster(sc, VirtualCore(), workload)
    huge = Request(1, 1, 0, 10**9, 8, 0.0)
    with pytest.raises(CapacityError, match=r"workload\.max_len: a 1000000008-token"):
        cluster.scheduler.submit(huge)
    assert not cluster.scheduler.pe_queue  # refused before anything was queued


def test_a_read_waiting_for_buffer_space_is_in_its_nodes_read_queue() -> None:
    """read_q is the node's read-queue length (paper Alg. 1), waiting reads included: a read
    counted only once it had buffer space hid every waiter from the next path choices, and
    with a full buffer they all picked the same side (the reads herded onto one SNIC)."""
    sc = small("hardware.dram_buffer_gb=1", agents=16)  # a buffer that makes reads wait
    seen: list[tuple[int, int]] = []  # (read_q of the chosen node, the read's hit): waits

    def setup(cluster: Cluster) -> None:
        sched = cluster.scheduler
        plan = sched.plan_read
        last: list[tuple[NodeState, int]] = []

        def planning(req: Request, stored: int) -> tuple[NodeState, int, float]:
            node, blocks, nbytes = plan(req, stored)
            last[:] = [(node, req.hit)]
            return node, blocks, nbytes

        sched.plan_read = planning  # type: ignore[method-assign]
        for node in cluster.hw.nodes.values():
            if node.state.role == "decode":
                acquire = _observed(node.buffer, last, seen)
                node.buffer.acquire_then = acquire  # type: ignore[method-assign]

    run_offline(sc, setup=setup)
    assert len(seen) > 20
    assert all(q >= hit for q, hit in seen), [w for w in seen if w[0] < w[1]][:3]


def _observed(
    pool: CapacityPool,
    last: list[tuple[NodeState, int]],
    seen: list[tuple[int, int]],
) -> Callable[[float, Callable[[], None]], None]:
    acquire = pool.acquire_then

    def wrapped(nbytes: float, then: Callable[[], None]) -> None:
        if last:  # the DE buffer's first acquire of a read comes right after its plan
            node, hit = last.pop()
            if hit and (pool.free < nbytes or pool._waiters):  # this read will wait
                seen.append((node.read_q, hit))
        acquire(nbytes, then)

    return wrapped


def test_a_pe_read_can_take_its_de_buffer_space_after_the_read() -> None:
    """fidelity.de_buffer_for_pe_reads=after-read: a PE-path read waits for DE buffer space
    only once it is in the PE buffer. Both readings serve every turn and conserve bytes;
    with a tight DE buffer and PE-side reads they differ."""
    sets = ("policy.name=basic", "hardware.dram_buffer_gb=1")  # basic: every read PE-side
    before = simulate(small(*sets, agents=16))
    after = simulate(small(*sets, "fidelity.de_buffer_for_pe_reads=after-read", agents=16))
    for r in (before, after):
        assert r["integrity"]["conservation_ok"] and r["requests"]["failed"] == 0
    assert after["requests"]["completed"] == before["requests"]["completed"]
    bd = (before["ttft_breakdown"]["stages"], after["ttft_breakdown"]["stages"])
    # the DE wait moves from before the read (buffer_wait) to after it (prefill_wait)
    assert bd[1]["buffer_wait"]["mean"] < bd[0]["buffer_wait"]["mean"]
    assert bd[1]["prefill_wait"]["mean"] > bd[0]["prefill_wait"]["mean"]


def test_a_runtime_that_replaces_the_read_seam_refuses_after_read() -> None:
    """The process runtime reads on one node in one RPC: it cannot move the DE reservation
    after the read, and says so when its scheduler is built, naming the setting."""

    class OneNodeReads(GlobalScheduler):
        def start_read(self, req: Request) -> None:
            raise AssertionError("never reached")

    sc = small("fidelity.de_buffer_for_pe_reads=after-read")

    async def build(clock: VirtualClock) -> str:
        cluster = build_cluster(sc, clock, 8000, 400)  # the plain scheduler accepts it
        s = cluster.scheduler
        with pytest.raises(ValueError, match="virtual time only") as err:
            OneNodeReads(s.ctx, s.pe_groups, s.de_groups)
        return str(err.value)

    assert "fidelity.de_buffer_for_pe_reads=after-read" in run_virtual_loop(build)


# --- the public seams the process runtime uses (runtimes/process/serving/recovery.py,
# remote_scheduler.py) ---
def test_live_engines_leave_out_the_nodes_that_are_down() -> None:
    sc = small("topology.decode_nodes=2", "topology.decode_group_nodes=2")

    async def main(clock: VirtualClock) -> tuple[set[str], set[str], bool]:
        s = build_cluster(sc, clock, 8000, 400).scheduler
        s.stop()
        group = s.de_groups[0]
        healthy = s.live_engines(group) is group  # the fast path: the group itself
        s.down.add("decode1")
        nodes = {e.node.name for e in group}
        return nodes, {e.node.name for e in s.live_engines(group)}, healthy

    nodes, live, healthy = run_virtual_loop(main)
    assert healthy and nodes == {"decode0", "decode1"} and live == {"decode0"}


def test_a_spawned_task_fails_the_run_unless_contained_to_its_request() -> None:
    class Containing(GlobalScheduler):
        def contain(self, req: Request, exc: BaseException) -> bool:
            return req.rid == 1  # request 1's failures are its own

    async def fail() -> None:
        raise KeyError("boom")

    async def main(clock: VirtualClock) -> tuple[bool, str]:
        s = build_cluster(small(), clock, 8000, 400).scheduler
        s.stop()
        c = Containing(s.ctx, s.pe_groups, s.de_groups)
        c.stop()
        loop = asyncio.get_running_loop()
        c.spawn(fail(), Request(1, 1, 0, 100, 8, 0.0, loop.create_future()))
        await clock.sleep(0.001)
        contained = not c.fatal.done()
        c.spawn(fail(), Request(2, 2, 0, 100, 8, 0.0, loop.create_future()))
        with pytest.raises(KeyError) as err:
            await asyncio.wait_for(c.fatal, 1.0)
        return contained, str(err.value)

    contained, err = run_virtual_loop(main)
    assert contained and err == "'boom'"


def test_a_read_goes_to_the_storage_target_its_last_block_is_striped_to() -> None:
    async def main(clock: VirtualClock) -> tuple[list[int], list[int]]:
        s = build_cluster(small("hardware.storage_targets=4"), clock, 8000, 400).scheduler
        s.stop()
        loop = asyncio.get_running_loop()
        reqs = [Request(i, i, 0, 100, 8, 0.0, loop.create_future()) for i in range(16)]
        want = [s.ctx.chains.target_of(r.session, 2, 4) for r in reqs]
        return [s.storage_target(r, 3) for r in reqs], want

    got, want = run_virtual_loop(main)
    assert got == want and set(got) <= set(range(4)) and len(set(got)) > 1


def _busy_fetches(mode: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, dict]:
    """(PE fetches run inside a forward, PE fetches run as a forward ended, the report)."""
    counts = [0, 0]
    at_end = [False]
    fetch = GlobalScheduler._fetch_prefill
    ended = GroupFetches.forward_ended

    def counting(self: GlobalScheduler, g: int) -> None:
        busy = all(self.pe_unit[e.engine_id].in_forward for e in self.pe_groups[g])
        if at_end[0]:
            counts[1] += 1
        elif busy:
            counts[0] += 1
        fetch(self, g)

    def ending(self: GroupFetches, g: int) -> None:
        at_end[0] = True
        try:
            ended(self, g)
        finally:
            at_end[0] = False

    monkeypatch.setattr(GlobalScheduler, "_fetch_prefill", counting)
    monkeypatch.setattr(GroupFetches, "forward_ended", ending)
    r = simulate(small(f"engine.fetch_mode={mode}", agents=16))
    return counts[0], counts[1], r


def test_per_forward_fetches_only_between_forwards(monkeypatch: pytest.MonkeyPatch) -> None:
    """`per-forward`: a PE group in a forward does not fetch; a kick waits for the end of
    the forward, and the group fetches then, before its next forward is formed, also when
    that forward follows at once. On-change fetches inside forwards (the contrast that
    shows the check can fail)."""
    inside_oc, _, on_change = _busy_fetches("on-change", monkeypatch)
    inside_pf, at_ends, per_forward = _busy_fetches("per-forward", monkeypatch)
    assert inside_oc > 0
    assert inside_pf == 0 and at_ends > 0
    assert per_forward["requests"]["completed"] == on_change["requests"]["completed"]
    assert per_forward["integrity"]["conservation_ok"]
    assert per_forward["integrity"]["blocks_lost"] == 0
    queue = [r["ttft_breakdown"]["stages"]["queue"]["mean"] for r in (on_change, per_forward)]
    assert queue[1] > queue[0]


def test_per_forward_fetches_are_refused_where_forwards_are_not_reported() -> None:
    """A scheduler whose prefill engines are elsewhere (it replaces the read seam) and that
    is not told of their forwards refuses per-forward fetches when it is built; the process
    runtime's is told (`reports_forwards`, tests/runtimes/process/serving/test_forwards.py)."""

    class OneNodeReads(GlobalScheduler):
        def start_read(self, req: Request) -> None:
            raise AssertionError("never reached")

    sc = small("engine.fetch_mode=per-forward")

    async def build(clock: VirtualClock) -> str:
        s = build_cluster(sc, clock, 8000, 400).scheduler  # the plain scheduler accepts it
        with pytest.raises(ValueError, match="not told") as err:
            OneNodeReads(s.ctx, s.pe_groups, s.de_groups)
        return str(err.value)

    assert "engine.fetch_mode=per-forward" in run_virtual_loop(build)
