"""A prefill or decode node process: its engines (the core's `PrefillUnit`/`DecodeUnit`,
state machines driven by `RealClock.call_at` on this process's asyncio loop), its links and
DRAM buffer, and the RPCs that reach them.

An EP group spanning several nodes steps in lockstep per node here (each node process runs
its own GPUs of the group together); see docs/services.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine
from typing import Any

import grpc
import redis.asyncio as aioredis

from dualpath.logs import event
from dualpath.model.blocks import BlockRange
from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import RealClock
from dualpath.model.engines.decode import DecodeUnit
from dualpath.model.engines.prefill import PrefillUnit
from dualpath.model.entities.request import EngineState, Request
from dualpath.rpc.v1 import kv_pb2, node_pb2, node_pb2_grpc, scheduler_pb2
from dualpath.runtimes.process.serving import payload
from dualpath.runtimes.process.serving.forwards import ForwardReports
from dualpath.runtimes.process.serving.mover import DistributedMover
from dualpath.runtimes.process.serving.node_io import NodeIo, RemoteDecodeUnit
from dualpath.runtimes.process.serving.node_tier import install, snapshot
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.pacing import node_pacer
from dualpath.runtimes.process.serving.peers import UNREACHABLE, Ctx, Peers
from dualpath.runtimes.process.serving.persists import Persists
from dualpath.runtimes.process.serving.prom import Families, Gauges
from dualpath.runtimes.process.serving.reports import ReportSender
from dualpath.runtimes.process.serving.reservations import Reservations
from dualpath.runtimes.process.serving.service import ServiceShell
from dualpath.runtimes.process.serving.stats import base_stats, pack
from dualpath.runtimes.process.serving.storage import charge, owned
from dualpath.runtimes.process.serving.tier_io import TierIo, serve_tier_read
from dualpath.runtimes.process.serving.vllm_engine import engine_families
from dualpath.runtimes.process.serving.wire import request_from_wire, request_to_wire
from dualpath.runtimes.process.serving.world import World, build_world

log = logging.getLogger(__name__)

Unit = PrefillUnit | DecodeUnit


class NodeShell(ServiceShell, node_pb2_grpc.NodeServicer):
    def __init__(self, opts: ServeOptions, world: World) -> None:
        super().__init__()
        cluster = world.cluster
        self.opts, self.world, self.name = opts, world, opts.name
        self.owned_links = world.owned_links()
        if self.name not in cluster.hw.nodes:
            raise ValueError(f"--node {opts.node}: the scenario has no node {self.name!r}")
        self.node_hw = cluster.hw.nodes[self.name]
        self.mover = DistributedMover(self.name, cluster.hw.fabric, self._charge_remote, self.fail)
        self.ctx = dataclasses.replace(cluster.context(opts.role), transport=self.mover)
        groups = cluster.groups("prefill") + cluster.groups("decode")
        self.engines: dict[str, EngineState] = {e.engine_id: e for g in groups for e in g}
        self.io = NodeIo(self)
        # this node's DRAM tier (docs/tier.md): its units' fills and its reads use it
        self.tier = install(self.ctx.tier, self.name, self.ctx.chains)
        self.tier_io = None
        if self.tier is not None:
            self.tier.on_change = self._tier_changed
            self.tier_io = TierIo(self.io, self.tier)
        self.pacer = node_pacer(cluster.hw.fabric.links, opts.real_payload, opts.dilation)
        self.reservations = Reservations(self.node_hw.buffer)
        self.persists_failed = 0  # persists the storage never took (it was down too long)
        self.persists = Persists(
            self.io.resend, opts.transfer_deadline(), self.persist_dropped, self.fail
        )
        self.forward_reports: ForwardReports | None = None
        self.units = self._build_units()
        self.unit_of: dict[str, Unit] = {e.engine_id: u for u in self.units for e in u.engines}
        self.peers: Peers | None = None
        self.working = asyncio.Event()  # set once the peers are known (on_peers)
        self.reports: ReportSender | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _build_units(self) -> list[Unit]:
        """This node's units only, grouped as the whole cluster's, with this process's hooks."""
        cluster, role = self.world.cluster, self.opts.role
        if role == "prefill":
            units = cluster.units_on(
                role,
                self.name,
                lambda es: PrefillUnit(self.ctx, es, self._prefilled, self._released),
            )
            if self.ctx.engine.fetch_mode == "per-forward":  # the scheduler holds fetches
                self.forward_reports = ForwardReports(units, self._send)
            return list(units)
        return cluster.units_on(
            role,
            self.name,
            lambda es: RemoteDecodeUnit(self.ctx, es, self._decoded, self.io, self._decoding),
        )

    def add_to(self, server: grpc.aio.Server) -> None:
        node_pb2_grpc.add_NodeServicer_to_server(self, server)

    async def on_peers(self, peers: Peers) -> None:
        self.peers = peers
        self.reports = ReportSender(peers, self.opts.rpc_timeout_s)
        self.reports.start()
        if self.forward_reports is not None:
            self.forward_reports.idle()
            self.reports.on_dropped = self.forward_reports.resync
        asyncio.get_running_loop().set_exception_handler(self._callback_failed)
        self.working.set()

    def _callback_failed(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The engines step by clock callbacks, not tasks: one that raises stops the node,
        as a failed engine task did (`fail`), besides being logged."""
        loop.default_exception_handler(context)
        exc = context.get("exception")
        if isinstance(exc, Exception) and "handle" in context:
            self.fail(exc)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` as this node's task: a failure of it stops the node (`fail`)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.fail(task.exception())  # type: ignore[arg-type]

    async def _charge_remote(self, owner: str, links: list[str], nbytes: float, vl: int) -> None:
        assert self.peers is not None
        size = payload.payload_size(nbytes, self.opts.real_payload)
        if self.pacer is not None:  # the bytes go at the owner's bottleneck link's rate
            await self.pacer.pace(self.pacer.bottleneck(links), vl, size)
        msg = kv_pb2.ChargeRequest(
            links=links, nbytes=nbytes, vl=vl, payload=payload.make(vl, size)
        )
        timeout = self.opts.transfer_deadline()
        if owner == "storage":
            await self.peers.storage().Charge(msg, timeout=timeout)
        else:
            await self.peers.node(owner).Charge(msg, timeout=timeout)

    def persist_dropped(self, rng: BlockRange, why: str) -> None:
        """The storage never acknowledged `rng` (refused, or down past the deadline): later
        turns miss those blocks (counted), the node goes on."""
        self.persists_failed += 1
        event(log, "persist_failed", logging.WARNING, session=rng.session, blocks=str(rng), why=why)

    # --- engine hooks --------------------------------------------------------------------
    def _released(self, req: Request) -> None:
        """The PE finished the prefill: free its buffer here, tell the scheduler."""
        held = self.reservations.take((req.rid, req.attempt))
        if held:  # (nothing if the scheduler abandoned the attempt: Release freed it)
            self.node_hw.buffer.release(held)
        self._report(scheduler_pb2.REPORT_KIND_PE_RELEASED, req)

    def _prefilled(self, req: Request) -> None:
        assert req.de is not None and self.peers is not None
        stub = self.peers.node(req.de.node.name)
        msg = request_to_wire(req, self.ctx.chains)
        self.spawn(self._hand_over(req, stub.Receive(msg, timeout=self.opts.transfer_deadline())))

    async def _hand_over(self, req: Request, call: Any) -> None:
        """The KV is in the DE's buffer; tell the DE. If it cannot be told (it died, it is
        overloaded) this one turn fails, explicitly, to the scheduler: never this node."""
        try:
            await call
        except grpc.aio.AioRpcError as exc:
            de = req.de.node.name if req.de else "?"
            event(
                log,
                "handover_failed",
                logging.WARNING,
                request_id=req.rid,
                de=de,
                error=exc.code().name,
            )
            # A DE that did not answer is named: the scheduler then waits for it to be back
            # (or places elsewhere) instead of handing the next attempt to it at once.
            self._report(
                scheduler_pb2.REPORT_KIND_FAILED,
                req,
                f"hand-over to {de} failed: {exc.code().name}",
                unreachable=de if exc.code() in UNREACHABLE and req.de else "",
            )

    def _decoding(
        self, req: Request, tokens: int, chunk_tokens: int, t_last: float, step_s: float
    ) -> None:
        """A decode chunk starts: announce its tokens so a stream can pace them. Every
        request gets one (this node cannot tell which are streamed); the sender batches
        them with the chunk's other reports into one RPC."""
        assert self.reports is not None
        self.reports.send(
            scheduler_pb2.Report(
                kind=scheduler_pb2.REPORT_KIND_PROGRESS,
                rid=req.rid,
                t_first=req.t_first,
                t_last=t_last,
                tokens=tokens,
                chunk_tokens=chunk_tokens,
                step_s=step_s,
                attempt=req.attempt,
            )
        )

    def _tier_changed(self, session: int, blocks: int) -> None:
        """This node's tier now holds [0, blocks) of `session`: the scheduler's directory."""
        if self.reports is not None:  # (fills happen only once the node works)
            self.reports.send(
                scheduler_pb2.Report(
                    kind=scheduler_pb2.REPORT_KIND_TIER,
                    session=session,
                    tier_blocks=blocks,
                    node=self.name,
                )
            )

    def _decoded(self, req: Request) -> None:
        self._report(scheduler_pb2.REPORT_KIND_DONE, req)

    def _send(self, report: scheduler_pb2.Report) -> None:
        assert self.reports is not None
        self.reports.send(report)

    def _report(self, kind: int, req: Request, message: str = "", unreachable: str = "") -> None:
        self._send(
            scheduler_pb2.Report(
                kind=kind,  # type: ignore[arg-type]
                rid=req.rid,
                t_first=req.t_first,
                t_second=req.t_second,
                t_last=req.t_last,
                message=message,
                unreachable=unreachable,
                attempt=req.attempt,
                t_scheduled=req.t_sched,
                forward_s=req.forward_s,
                load_wait_s=req.load_wait_s,
                t_handed=req.t_handed,
                t_in_hbm=req.t_in_hbm,
                t_joined=req.t_joined,
            )
        )

    # --- RPCs ------------------------------------------------------------------------
    async def Charge(  # noqa: N802 (gRPC method name)
        self, request: kv_pb2.ChargeRequest, context: Ctx
    ) -> kv_pb2.ChargeReply:
        try:
            links = owned(self.world, list(request.links))
            got = payload.verify(request.payload, "charge")
            want = payload.payload_size(request.nbytes, self.opts.real_payload)
            if got != want:
                raise payload.PayloadError(f"charge: {got} payload bytes, expected {want}")
            self.payload_bytes_verified += got
        except (ValueError, payload.PayloadError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        await charge(self.ctx.hw.fabric, links, request.nbytes, request.vl)
        return kv_pb2.ChargeReply(done_at_s=self.ctx.clock.now())

    async def ReadKv(  # noqa: N802
        self, request: node_pb2.ReadKvRequest, context: Ctx
    ) -> node_pb2.ReadKvReply:
        return await self.io.read_kv(request, context)

    async def TierRead(  # noqa: N802
        self, request: node_pb2.TierReadRequest, context: Ctx
    ) -> node_pb2.TierReadReply:
        return await serve_tier_read(self.tier, self.ctx.chains, request, context)

    async def Enqueue(  # noqa: N802
        self, request: node_pb2.TurnRequest, context: Ctx
    ) -> node_pb2.Ack:
        req = self._rebuild(request)
        assert req.pe is not None
        unit = self.unit_of.get(req.pe.engine_id)
        if not isinstance(unit, PrefillUnit):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{req.pe.engine_id} not here")
        key = (req.rid, req.attempt)
        if self.reservations.abandoned(key):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"turn {req.rid} abandoned")
        unit.enqueue(req)
        return node_pb2.Ack()

    async def Receive(  # noqa: N802
        self, request: node_pb2.TurnRequest, context: Ctx
    ) -> node_pb2.Ack:
        req = self._rebuild(request)
        assert req.de is not None
        unit = self.unit_of.get(req.de.engine_id)
        if not isinstance(unit, DecodeUnit):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{req.de.engine_id} not here")
        # The buffer the read reserved is consumed here (the unit frees it once in HBM); an
        # attempt the scheduler abandoned had it freed by Release and is refused.
        key = (req.rid, req.attempt)
        if self.reservations.abandoned(key) or (
            req.buffer_bytes > 0 and not self.reservations.holds(key)
        ):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"turn {req.rid} abandoned")
        self.reservations.take(key)
        unit.receive(req)
        return node_pb2.Ack()

    async def Release(  # noqa: N802
        self, request: node_pb2.ReleaseRequest, context: Ctx
    ) -> node_pb2.ReleaseReply:
        freed = self.reservations.release((int(request.request_id), int(request.attempt)))
        return node_pb2.ReleaseReply(released_bytes=freed)

    def _rebuild(self, msg: node_pb2.TurnRequest) -> Request:
        return request_from_wire(msg, self.engines, self.ctx.chains)

    async def Stats(  # noqa: N802
        self, request: kv_pb2.StatsRequest, context: Ctx
    ) -> kv_pb2.StatsReply:
        return kv_pb2.StatsReply(msgpack=pack(self.stats()))

    # --- lifecycle and observability -------------------------------------------------
    async def stop(self) -> None:
        if self.reports is not None:
            await self.reports.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.persists.close()
        await self.mover.close()

    def stats(self) -> dict[str, Any]:
        out = base_stats(self.name, self.ctx.clock, self.owned_links, self.ctx.metrics)  # type: ignore[arg-type]
        out["remote_charges"] = self.mover.remote_charges
        out["payload_bytes_verified"] = self.payload_bytes_verified
        out["report_batches"] = self.reports.batches if self.reports else 0
        out["persists_failed"] = self.persists_failed
        out["persists_resent"] = self.persists.resent
        out["persists_unsettled"] = len(self.persists.kept)
        out["charges_lost"] = self.mover.charges_lost
        out["buffer_released_bytes"] = self.reservations.released_bytes
        if self.pacer is not None:
            out["pacing"] = self.pacer.stats()
        if self.tier is not None:
            out["tier"] = snapshot(self.tier)
        return out

    def gauges(self) -> Gauges:
        return self.io.gauges

    def families(self) -> Families:
        model = self.world.cluster.scenario.model
        return lambda: engine_families(model, self.ctx, self.units)

    def health(self) -> dict[str, Any]:
        return {"service": self.name, "engines": len(self.unit_of)}


async def make_node(
    opts: ServeOptions, sc: Scenario, clock: RealClock, r: aioredis.Redis
) -> ServiceShell:
    return NodeShell(opts, build_world(sc, clock, opts.name))
