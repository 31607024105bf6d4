"""The scheduler process: the core's global scheduler, the batched reports from the nodes,
the registry watch, and the HTTP front door (OpenAI-compatible + native agent turns)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc
import redis.asyncio as aioredis
from aiohttp import web

from dualpath.logs import event
from dualpath.model.config.settings import Scenario
from dualpath.model.core.clock import RealClock
from dualpath.model.entities.request import Request
from dualpath.rpc.v1 import kv_pb2, node_pb2, scheduler_pb2, scheduler_pb2_grpc
from dualpath.runtimes.process.control import EventLog, Member
from dualpath.runtimes.process.frontdoor import (
    BackendUnavailable,
    make_app,
)
from dualpath.runtimes.process.frontdoor.hf_tokenizer import load_tokenizer
from dualpath.runtimes.process.serving import dashboard
from dualpath.runtimes.process.serving.admission import Admission
from dualpath.runtimes.process.serving.events import EventSink
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.peers import Ctx, Peers
from dualpath.runtimes.process.serving.prom import ServiceCollector, registry_for
from dualpath.runtimes.process.serving.remote_scheduler import RemoteScheduler
from dualpath.runtimes.process.serving.service import ServiceShell
from dualpath.runtimes.process.serving.stats import base_stats, pack
from dualpath.runtimes.process.serving.turns import TurnsBackend
from dualpath.runtimes.process.serving.world import World, build_world

log = logging.getLogger(__name__)


class SchedulerShell(TurnsBackend, ServiceShell, scheduler_pb2_grpc.SchedulerServicer):
    def __init__(
        self, opts: ServeOptions, world: World, clock: RealClock, events: EventSink
    ) -> None:
        super().__init__()
        self.events = events
        self.opts, self.world, self.clock = opts, world, clock
        self.name = "scheduler"
        self.owned_links = []
        self.sched = _remote(world)
        self.sched.fatal.add_done_callback(self._on_fatal)
        self.sched.on_done = self._record_done
        self._rids = itertools.count(1)
        self.admission = Admission(clock.now, opts.max_queue_delay_s)
        self._turns: dict[int, Request] = {}  # id(spec) -> its request, while it runs
        self.cancelled = 0
        self.lost: set[str] = set()
        self._pids: dict[str, str] = {}  # node -> the pid it registered with
        self.exit_on_fatal = False  # keep serving so clients learn why the run failed

    def _on_fatal(self, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            self.fail(fut.exception())  # type: ignore[arg-type]
            for req in self.sched.inflight.values():
                if req.done is not None and not req.done.done():
                    req.done.set_exception(BackendUnavailable(f"the run failed: {fut.exception()}"))

    def add_to(self, server: grpc.aio.Server) -> None:
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(self, server)

    async def on_peers(self, peers: Peers) -> None:
        self.sched.peers = peers

    def on_members(self, members: list[Member]) -> None:
        """The registry is the failure detector: a node whose heartbeat expired is lost."""
        live = {m.name for m in members}
        expected = set(self.world.cluster.hw.nodes) | {"storage"}
        lost = expected - live
        engines = set(self.world.cluster.hw.nodes)
        # A node restarted within its TTL never looks absent, but its predecessor's turns
        # died with it: a new pid is a lost node, placed on again after one lease (by then
        # every service calls its new address: `node_restarted`).
        renewed = set()
        for m in members:
            pid = m.meta.get("pid", "")
            if self._pids.setdefault(m.name, pid) != pid:
                self._pids[m.name] = pid
                renewed.add(m.name)
                if m.name in engines and m.name not in self.lost:
                    event(log, "node_restarted", logging.WARNING, node=m.name, pid=pid)
                    self.events.emit("engine_restarted", self.clock.now(), name=m.name)
                    self.sched.node_restarted(m.name)
        for name in sorted(lost - self.lost):
            event(log, "node_lost", logging.WARNING, node=name, why="no heartbeat")
            self.events.emit("engine_lost", self.clock.now(), name=name)
            if name in engines:
                self.sched.node_lost(name)
        for name in sorted(self.lost - lost):
            event(log, "node_back", node=name)
            self.events.emit("engine_back", self.clock.now(), name=name)
            if name in renewed and name in engines:  # a new process: after one lease
                self.sched.node_restarted(name)
            else:
                self.sched.node_back(name)
        self.lost = lost
        # a suspect still registered a lease after the refusal is alive after all
        lease = self.opts.heartbeat_ttl_s * self.clock.dilation
        for name, since in list(self.sched.suspects.items()):
            if name in live and self.clock.now() - since > lease:
                self.sched.node_back(name)

    def _record_done(self, req: Request) -> None:
        event(
            log,
            "turn_done",
            request_id=req.rid,
            session=req.session,
            turn=req.turn,
            path=req.path.value,
            hit=req.hit,
            ttft_s=req.t_first - req.arrival,
            e2e_s=req.t_last - req.arrival,
        )
        self.events.emit(
            "turn_done",
            req.t_last,
            rid=req.rid,
            session=req.session,
            turn=req.turn,
            prompt=req.prompt,
            hit=req.hit,
            gen=req.gen,
            path=req.path.value,
            arrival=req.arrival,
            t_first=req.t_first,
        )

    # --- gRPC ------------------------------------------------------------------------
    async def Report(  # noqa: N802 (gRPC method name)
        self, request: scheduler_pb2.ReportBatch, context: Ctx
    ) -> node_pb2.Ack:
        for rep in request.reports:
            try:
                self.sched.on_report(rep)
            except Exception as exc:  # one bad report fails its turn at most, never the scheduler
                event(
                    log,
                    "report_failed",
                    logging.ERROR,
                    exc=exc,
                    trace=True,
                    request_id=rep.rid,
                    kind=rep.kind,
                )
        return node_pb2.Ack()

    async def Stats(  # noqa: N802
        self, request: kv_pb2.StatsRequest, context: Ctx
    ) -> kv_pb2.StatsReply:
        return kv_pb2.StatsReply(msgpack=pack(self.stats()))

    def http_app(self) -> web.Application:
        c = self.world.cluster
        sc = c.scenario
        reg = registry_for(ServiceCollector(self.name, self.clock, [], self.gauges()))
        app = make_app(
            self,
            model=sc.model,
            block_tokens=sc.engine.block_tokens,
            max_prompt_tokens=self._max_prompt(),
            max_gen_tokens=65_536,
            registry=reg,
            extra_health=self.health,
            tokenizer=load_tokenizer(sc.frontdoor.tokenizer) if sc.frontdoor.tokenizer else None,
        )
        dashboard.install(app, self, reg)  # GET /dashboard, /dashboard/data
        return app

    def _max_prompt(self) -> int:
        c = self.world.cluster
        de = c.scheduler.de_groups[0][0]
        return int(c.hw.gpu_of(de).kv_hbm // c.scheduler.ctx.kv_token)

    # --- observability -------------------------------------------------------------
    def gauges(self) -> Callable[[], dict[str, list[tuple[dict[str, str], float]]]]:
        model = self.world.cluster.scenario.model

        def read() -> dict[str, list[tuple[dict[str, str], float]]]:
            s = self.sched
            return {
                # turns on no engine yet: `engine` empty (the nodes report their engines')
                "vllm:num_requests_waiting": [
                    ({"model_name": model, "engine": ""}, len(s.pe_queue) + len(s.de_queue))
                ],
                "dualpath_turns_inflight": [({}, len(s.inflight))],
                "dualpath_read_queue_tokens": [
                    ({"node": name}, n.state.read_q)
                    for name, n in self.world.cluster.hw.nodes.items()
                ],
            }

        return read

    def health(self) -> dict[str, Any]:
        return {
            "service": self.name,
            "ready": self.ready,
            "inflight": len(self.sched.inflight),
            "lost": sorted(self.lost),
            "failed": str(self.fatal.exception()) if self.fatal.done() else None,
            "queue_delay_s": round(self.admission.queue_delay_s, 3),
            "shed": self.admission.shed,
            "cancelled": self.cancelled,
        }

    def stats(self) -> dict[str, Any]:
        out = base_stats(self.name, self.clock, [], self.sched.ctx.metrics, requests=True)
        out["inflight"] = len(self.sched.inflight)
        out["stages"] = self.sched.stages.means()
        out["turns_replaced"] = self.sched.replaced
        out["forward_reports"] = self.sched.forwards.reported
        out["turns_cancelled"] = self.cancelled
        out["nodes_lost"] = sorted(self.lost)
        return out

    async def stop(self) -> None:
        self.ready = False
        self.sched.stop()
        await self.events.close()


async def make_scheduler(
    opts: ServeOptions, sc: Scenario, clock: RealClock, r: aioredis.Redis
) -> ServiceShell:
    events = EventSink(EventLog(r, opts.run_id, "scheduler"))
    events.start()
    return SchedulerShell(opts, scheduler_world(sc, clock, opts), clock, events)


def scheduler_world(sc: Scenario, clock: RealClock, opts: ServeOptions) -> World:
    """The scheduler process's world: the composition root builds its `RemoteScheduler`
    (the core's placement, requests moved over gRPC) in place of the core's scheduler."""
    return build_world(sc, clock, "scheduler", functools.partial(RemoteScheduler, opts=opts))


def _remote(world: World) -> RemoteScheduler:
    sched = world.cluster.scheduler
    if not isinstance(sched, RemoteScheduler):  # a wiring mistake, not an input error
        raise TypeError(
            "SchedulerShell: the world's scheduler is the core's GlobalScheduler; build the "
            "world with scheduler_world(sc, clock, opts)"
        )
    return sched
