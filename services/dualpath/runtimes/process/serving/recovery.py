"""What the scheduler does when a node is lost or does not answer (the process runtime).

Placement skips lost and suspected nodes (`GlobalScheduler.down`). A turn whose client
has seen none of its tokens is placed again as a new attempt (its old attempt's
reservations are released on the nodes, and their late reports ignored): one that had not
produced a token, and one answered in one piece (not streamed) whatever it had generated,
as request migration does in serving routers. A stream that has sent its first token fails
at once, naming the node: what its client already has cannot be replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import abstractmethod

import grpc

from dualpath.logs import event
from dualpath.model.engines.scheduler import GlobalScheduler
from dualpath.model.entities.request import Request
from dualpath.model.policies.base import release_decode, release_prefill
from dualpath.rpc.v1 import node_pb2
from dualpath.runtimes.process.serving import retry
from dualpath.runtimes.process.serving.options import ServeOptions
from dualpath.runtimes.process.serving.pacer import TokenPacer
from dualpath.runtimes.process.serving.peers import Peers

MAX_ATTEMPTS = 3  # placements of one turn before its failure reaches the client

log = logging.getLogger(__name__)


class NodeLostError(RuntimeError):
    """A node of a streamed turn's path stopped heartbeating after its first token went out
    (or of any turn, once it has been placed MAX_ATTEMPTS times)."""


class Recovery(GlobalScheduler):
    opts: ServeOptions
    peers: Peers | None
    inflight: dict[int, Request]
    pacers: dict[int, TokenPacer]  # the streamed turns
    replaced: int
    suspects: dict[str, float]
    lost_nodes: set[str]
    _reading: dict[int, asyncio.Task[None]]

    @abstractmethod
    def fail_request(self, req: Request, exc: BaseException) -> None: ...

    def node_lost(self, name: str) -> None:
        """`name` stopped heartbeating: place nothing more on it; its turns whose clients
        have seen no token are placed again on live engines, the streams that have sent
        one fail now (what their clients have cannot be replayed), naming the node."""
        if name in self.lost_nodes:
            return
        self.lost_nodes.add(name)
        self.down.add(name)  # (it may have been only suspected so far)
        self.suspects.pop(name, None)
        for req in list(self.inflight.values()):
            # A turn needs its PE until the DE has it: its first decode chunk (a PROGRESS
            # report) is the sign; a PE lost between its release and the hand-over would
            # leave the turn waiting for a Receive that never comes.
            on_pe = req.pe is not None and req.pe.node.name == name and req.generated == 0
            on_de = req.de is not None and req.de.node.name == name
            if not (on_pe or on_de):
                continue
            why = NodeLostError(f"node {name} was lost (no heartbeat) during turn {req.rid}")
            if not self._retry(req, why):
                self.fail_request(req, why)
        for g, grp in enumerate(self.de_groups):  # a dead group's queue goes back to all
            if not self.live_engines(grp) and self.de_private[g]:
                self.de_queue.extendleft(reversed(self.de_private[g]))
                self.de_private[g].clear()
        self._kick_all()

    def suspect(self, name: str) -> None:
        """A call to `name` was refused: place nothing there until the registry shows it
        alive after `opts.heartbeat_ttl_s` (a dead node drops out of it by then)."""
        if name not in self.down:
            event(log, "node_suspected", logging.WARNING, node=name, why="a call was refused")
            self.down.add(name)
            self.suspects[name] = self.ctx.clock.now()

    def node_restarted(self, name: str) -> None:
        """`name` registered with a new pid: its predecessor's turns died with it (as if
        lost), and the new process is placed on only after one lease (as a suspect), by
        when every service has read the registry (every ttl/2) and calls its new address.
        Placed on at once, the next turn's hand-over went to the old address and failed."""
        self.node_lost(name)
        self.lost_nodes.discard(name)  # (its tier reports are the new process's)
        self.suspects[name] = self.ctx.clock.now()

    def node_back(self, name: str) -> None:
        self.suspects.pop(name, None)
        self.lost_nodes.discard(name)
        if name in self.down:
            self.down.discard(name)
            self._kick_all()

    def _retry(self, req: Request, exc: BaseException) -> bool:
        """Place a turn whose client has seen no token again, at the head of the queue."""
        streamed = req.t_first >= 0 and req.rid in self.pacers  # its first token went out
        if streamed or req.attempt + 1 >= MAX_ATTEMPTS or req.rid not in self.inflight:
            return False
        event(
            log,
            "turn_replaced",
            logging.WARNING,
            exc=exc,
            request_id=req.rid,
            attempt=req.attempt + 1,
        )
        self._abandon(req)
        req.unplace()
        self.replaced += 1
        self.pe_queue.appendleft(req)  # it arrived before anything queued now
        self._kick_all()
        return True

    def _abandon(self, req: Request) -> None:
        """Undo what this attempt holds: its read, its place in a queue, the engines' counts
        here and its buffer reservations on the nodes."""
        task = self._reading.pop(req.rid, None)
        if task is not None:
            task.cancel()
        for q in (self.pe_queue, self.de_queue, *self.de_private):
            if req in q:
                q.remove(req)
        pe, de = req.pe, req.de
        if pe is not None and req.t_first < 0:  # the PE never reported its release
            release_prefill(req)
            self.fetches.kick("pe", [pe.group])
        if de is not None:
            release_decode(req)
            self.fetches.kick("de", [de.group])
        for node in {e.node.name for e in (pe, de) if e is not None} - self.down:
            self.spawn(self._release_on(node, req.rid, req.attempt))

    async def _release_on(self, node: str, rid: int, attempt: int) -> None:
        if self.peers is None:
            return
        msg = node_pb2.ReleaseRequest(request_id=rid, attempt=attempt)
        peers = self.peers
        # a node that cannot be reached is gone: what it held went with it
        with contextlib.suppress(grpc.aio.AioRpcError, TimeoutError, ConnectionError, KeyError):
            await retry.idempotent(
                lambda timeout: peers.node(node).Release(msg, timeout=timeout),
                self.opts.rpc_timeout_s,
            )

    def _kick_all(self) -> None:
        self.fetches.kick("pe", self.fetches.pe_order())
        self.fetches.kick_every("de")
