"""runtimes/process/serving/remote_scheduler.py, on virtual time: a failed KV read names what the
node that
verified it found, and a fatal error's turns stay failed when their reports come in."""

from __future__ import annotations

import asyncio

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.model.entities.request import Request
from dualpath.rpc.v1 import node_pb2, scheduler_pb2
from dualpath.runtimes.cluster import build_cluster
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.remote_scheduler import KvReadFailedError, RemoteScheduler


def test_corrupted_read_names_the_node_digests() -> None:
    """The scheduler only learns the error kind from the node that verified the read; its
    message must carry the node's digests (it used to invent 0x0 != 0x0)."""

    async def main(clock: VirtualClock) -> None:
        c = build_cluster(resolve("smoke", {}, []), clock, 1000, 100)
        c.scheduler.stop()
        opts = ServeOptions(role="scheduler", redis_url="redis://127.0.0.1:6379/0")
        rs = RemoteScheduler(c.scheduler.ctx, c.scheduler.pe_groups, c.scheduler.de_groups, opts)
        loop = asyncio.get_running_loop()
        req = Request(rid=7, session=3, turn=0, prompt=1000, gen=10, arrival=0.0,
                      done=loop.create_future())  # fmt: skip
        error = "session 3 blocks [0, 15): stored digest 0x52b53f18 != chain digest 0x362eea0a"
        reply = node_pb2.ReadKvReply(error=error, error_kind="corrupted")
        with pytest.raises(KvReadFailedError, match="0x52b53f18 != chain digest 0x362eea0a"):
            rs._account_read(req, reply, 15, 1e6)
        assert rs.ctx.metrics.integrity.blocks_corrupted == 1
        # The fatal error fails every turn in flight; a DONE report for one of them must
        # not crash the Report RPC (it used to raise InvalidStateError in the scheduler,
        # which killed the reporting decode process and lost the run's report).
        de = rs.de_groups[0][0]
        req.de, de.seq, de.tok = de, de.seq + 1, de.tok + req.length
        rs.inflight[req.rid] = req
        req.done.set_exception(RuntimeError("the run failed"))
        done = scheduler_pb2.Report(
            rid=req.rid, kind=scheduler_pb2.REPORT_KIND_DONE, t_first=1.0, t_second=1.1, t_last=2
        )
        rs.on_report(done)
        assert req.rid not in rs.inflight and de.seq == 0
        assert isinstance(req.done.exception(), RuntimeError)

    run_virtual(main)
