"""`dualpath-split`: the split rule, when it splits, and what a split read does on virtual
time (two flows whose bytes sum to the hit, every buffer and queue back to zero, integrity
intact); the process runtime refuses it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.entities.request import NodeState, ReadPath, Request
from dualpath.model.policies.base import Limits
from dualpath.model.policies.registry import default_registry
from dualpath.model.policies.split import DualPathSplit, pe_share
from dualpath.report.build import build_report
from dualpath.runtimes.cluster import build_cluster
from dualpath.runtimes.virtual.sim import SimOutcome, run_offline, run_virtual_loop

pytestmark = pytest.mark.timeout(120)

LIMITS = Limits(alpha=1000, beta=1000, compute_quota_s=0.3, kv_bytes_per_token=10)


def _policy(name: str) -> Any:
    return default_registry().create(name, LIMITS, 0)


def _req(hit: int) -> Request:
    loop = asyncio.new_event_loop()
    req = Request(rid=1, session=1, turn=0, prompt=hit + 100, gen=1, arrival=0.0,
                  done=loop.create_future(), hit=hit)  # fmt: skip
    loop.close()
    return req


def _nodes(pe_q: int, de_q: int) -> tuple[NodeState, NodeState]:
    return NodeState("p", "prefill", 0, pe_q), NodeState("d", "decode", 0, de_q)


@pytest.mark.parametrize(
    ("hit", "pe_q", "de_q", "want"),
    [
        (1000, 500, 500, 500),  # equal queues: half each
        (1000, 800, 200, 200),  # PE 800 + 200 = DE 200 + 800
        (1000, 200, 800, 800),
        (1000, 3000, 100, 0),  # imbalance >= hit: all on the shorter side (DualPath's)
        (1000, 100, 3000, 1000),
        (1000, 1100, 100, 0),  # exactly the hit apart: still one side
    ],
)
def test_share_makes_both_sides_finish_together(hit: int, pe_q: int, de_q: int, want: int) -> None:
    x = pe_share(hit, pe_q, de_q)
    assert x == want
    if 0 < x < hit:  # both parts drain at the same (equal) SNIC rate: queues end equal
        assert abs((pe_q + x) - (de_q + hit - x)) <= 1


@pytest.mark.parametrize(("pe_q", "de_q"), [(0, 0), (0, 500), (500, 0), (0, 10**6), (10**6, 0)])
def test_reads_like_dualpath_when_a_side_is_idle(pe_q: int, de_q: int) -> None:
    split, dualpath = _policy("dualpath-split"), _policy("dualpath")
    req = _req(4096)
    assert split.choose_path(req, *_nodes(pe_q, de_q)) == dualpath.choose_path(
        req, *_nodes(pe_q, de_q)
    )
    assert req.pe_part == 0


def test_splits_when_both_sides_are_busy() -> None:
    policy = _policy("dualpath-split")
    req = _req(4096)
    assert policy.choose_path(req, *_nodes(3000, 1000)) is ReadPath.SPLIT
    assert req.pe_part == (4096 + 1000 - 3000) // 2
    far = _req(1000)  # queues further apart than the hit: the shorter side, whole
    assert policy.choose_path(far, *_nodes(5000, 1000)) is ReadPath.DE
    assert policy.choose_path(far, *_nodes(1000, 5000)) is ReadPath.PE
    assert policy.choose_path(_req(0), *_nodes(10, 10)) is ReadPath.DE  # no hit: tie rule


def test_registered_and_otherwise_dualpath() -> None:
    reg = default_registry()
    assert reg.get("dualpath-split") is DualPathSplit
    assert "dualpath-split" in reg.describe()
    split = _policy("dualpath-split")
    assert split.layerwise and split.dual_path and not split.oracle


def _split_run(agents: int = 24) -> tuple[SimOutcome, dict[str, Any]]:
    sc = resolve(
        "smoke", {"workload": {"agents": agents}, "policy": {"name": "dualpath-split"}}, []
    )
    outcome = run_offline(sc)
    return outcome, build_report(outcome.cluster, outcome.jct_s, outcome.wall_s, outcome.workload)


@pytest.fixture(scope="module")
def split_run() -> tuple[SimOutcome, dict[str, Any]]:
    return _split_run()


def test_split_reads_happen_and_conserve_bytes(split_run: tuple[SimOutcome, Any]) -> None:
    outcome, report = split_run
    paths = report["read_path"]
    assert paths["split"] > 0, paths  # the smoke cluster at 24 agents has both queues busy
    integ = report["integrity"]
    assert integ["blocks_lost"] == integ["blocks_corrupted"] == 0
    assert integ["conservation_ok"]
    by_path = report["read_bytes_by_path"]
    assert by_path["pe"] + by_path["de"] == pytest.approx(integ["bytes_from_storage"], rel=1e-9)
    assert len(outcome.cluster.metrics.requests) == sum(
        len(s.turns) for s in outcome.workload.scripts
    )
    assert {r.path for r in outcome.cluster.metrics.requests} >= {"split"}


def test_split_reads_leave_nothing_behind(split_run: tuple[SimOutcome, Any]) -> None:
    """Every byte reserved in a PE or DE buffer and every queued token is given back."""
    hw = split_run[0].cluster.hw
    for node in hw.nodes.values():
        assert node.buffer.used == pytest.approx(0.0, abs=1e-3), node.state.name
        assert node.state.read_q == 0, node.state.name


def test_split_run_is_deterministic(split_run: tuple[SimOutcome, Any]) -> None:
    again = _split_run()[1]
    assert again["jct_s"] == split_run[1]["jct_s"]
    assert again["read_path"] == split_run[1]["read_path"]


def test_process_runtime_refuses_split_reads() -> None:
    """A scheduler that replaces the read seam (as the process runtime's does) cannot run
    split reads: it says so when it is built, not in the middle of a run."""

    class OneNodeReads(GlobalScheduler):
        def start_read(self, req: Request) -> None:
            raise AssertionError("never reached")

    sc = resolve("smoke", {"policy": {"name": "dualpath-split"}}, [])

    async def build(clock: Any) -> str:
        cluster = build_cluster(sc, clock, 8000, 400)  # the plain scheduler accepts it
        ctx = cluster.scheduler.ctx
        with pytest.raises(ValueError, match="virtual time only") as err:
            OneNodeReads(ctx, cluster.scheduler.pe_groups, cluster.scheduler.de_groups)
        return str(err.value)

    msg = run_virtual_loop(build)
    assert "policy.name=dualpath-split" in msg


def test_engine_state_untouched_by_choice() -> None:
    """choose_path only reads the queues: the shell adds each part to its side's read_q."""
    pe, de = _nodes(3000, 1000)
    _policy("dualpath-split").choose_path(_req(4096), pe, de)
    assert (pe.read_q, de.read_q) == (3000, 1000)
