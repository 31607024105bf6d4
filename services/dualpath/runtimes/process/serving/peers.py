"""gRPC channels to the other services of a run, found through the Redis registry."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import grpc

from dualpath.rpc.v1 import kv_pb2_grpc, node_pb2_grpc, scheduler_pb2_grpc
from dualpath.runtimes.process.control import Member
from dualpath.runtimes.process.serving.payload import MAX_PAYLOAD_BYTES

# The largest message of the runtime is a real-payload unary call: a `WriteBlocksRequest`
# (node_io.py: every block of a request's write, batched into one message) or a
# `ChargeRequest` (node.py) carries ONE `Payload` of `payload_size()` bytes, which
# payload.py caps at MAX_PAYLOAD_BYTES (64 MiB) however many blocks the write batches and
# whatever --real-payload is. Storage reads stream `CHUNK_BYTES` (1 MiB) pieces. Around the
# payload sit only small fields: per range a few varints and the session's fork lineage
# (~20 bytes a fork), per range one digest; 1 MiB of headroom holds ~50k forks, far more
# than any session makes. Stats replies (msgpack counters) and turn/report messages are
# KiB-sized. A message over the cap fails that call with RESOURCE_EXHAUSTED (gRPC checks
# it on both ends per message); the process and its other calls carry on.
ENVELOPE_BYTES = 1 << 20
MAX_MESSAGE_BYTES = MAX_PAYLOAD_BYTES + ENVELOPE_BYTES
# Servers (host.py) and channels use the same options: a cap that differs between the ends
# would only move the failure to the other side.
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    # A peer restarted at the same address (compose, Kubernetes) is called again within a
    # second; gRPC's default backoff grows to 120 s, and calls fail at once meanwhile.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]


def server_options(max_concurrent_rpcs: int, transfer_timeout_s: float) -> list[tuple[str, int]]:
    """A service's gRPC server options: the channels' caps, and room for every call it may
    hold. The C-core server keeps a call that has arrived but that the asyncio server has
    not yet taken (it takes ONE per event-loop turn) in a pending queue, and cancels it
    with a bare CANCELLED beyond 1,000 pending calls (randomly between 1,000 and 3,000,
    all beyond) or after 30 s pending. A node busy with a burst falls that far behind: its
    hand-overs (PE -> DE `Receive`) and the scheduler's `Enqueue`s ended CANCELLED with
    the node alive, and their turns 503. Now the bound is the one the service states,
    `max_concurrent_rpcs` (beyond it RESOURCE_EXHAUSTED), and a call waits for as long as
    its caller's deadline allows (the longest is the transfer deadline)."""
    return [
        *CHANNEL_OPTIONS,
        ("grpc.server.max_pending_requests", max_concurrent_rpcs),
        ("grpc.server.max_pending_requests_hard_limit", max_concurrent_rpcs),
        ("grpc.server_max_unrequested_time_in_server", math.ceil(transfer_timeout_s)),
    ]


# A peer that did not answer: it is down, restarting or swamped. A turn that failed for
# this reason has not decoded, so the scheduler places it again, elsewhere if it can.
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

Ctx = grpc.aio.ServicerContext[Any, Any]
AUTH_HEADER = "authorization"  # gRPC metadata keys are lower-case


def bearer(token: str) -> str:
    return f"Bearer {token}"


class _Bearer:
    """Adds `authorization: Bearer TOKEN` to a call's metadata, keeping the caller's."""

    def __init__(self, token: str) -> None:
        self._pair = (AUTH_HEADER, bearer(token))

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(d.metadata or ()), self._pair)
        return grpc.aio.ClientCallDetails(
            d.method, d.timeout, metadata, d.credentials, d.wait_for_ready
        )


# One class per call kind: grpc.aio files an interceptor under the FIRST kind it is an
# instance of (an if/elif chain in aio/_channel.py), so one class deriving from all four
# would silently skip streaming calls (storage reads are unary-stream).
class _BearerUnaryUnary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)


class _BearerUnaryStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)


class _BearerStreamUnary(_Bearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request_iterator)


class _BearerStreamStream(_Bearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request_iterator)


def bearer_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """The token on every call of a channel, whatever its kind, so no call site can forget
    it (servers check it: auth.py `TokenCheck`)."""
    kinds = (_BearerUnaryUnary, _BearerUnaryStream, _BearerStreamUnary, _BearerStreamStream)
    return [kind(token) for kind in kinds]


def make_channel(addr: str, token: str | None = None) -> grpc.aio.Channel:
    """A channel to one service of the run: the runtime's message caps, and the run's token
    on every call when it has one (without one: no interceptor, no per-call cost)."""
    interceptors = bearer_interceptors(token) if token is not None else None
    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS, interceptors=interceptors)


class UnknownPeerError(LookupError):
    pass


class Peers:
    """One channel per peer service (by registry name: storage, scheduler, prefill0, ...)."""

    def __init__(self, token: str | None = None) -> None:
        self._token = token
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._addrs: dict[str, str] = {}
        self.members: dict[str, Member] = {}
        self._retired: list[grpc.aio.Channel] = []  # replaced channels, closed with the rest

    def update(self, members: list[Member]) -> None:
        """A new channel for a peer at a new address or with a new pid (a restarted process
        at the same address: a fresh connection, not one waiting out a reconnect backoff)."""
        for m in members:
            old = self.members.get(m.name)
            self.members[m.name] = m
            new_pid = old is not None and old.meta.get("pid") != m.meta.get("pid")
            if self._addrs.get(m.name) != m.grpc_addr or new_pid:
                self._addrs[m.name] = m.grpc_addr
                stale = self._channels.get(m.name)
                if stale is not None:
                    self._retired.append(stale)  # (its calls in flight end on their own)
                self._channels[m.name] = make_channel(m.grpc_addr, self._token)

    def _channel(self, name: str) -> grpc.aio.Channel:
        try:
            return self._channels[name]
        except KeyError:
            raise UnknownPeerError(f"no live service named {name!r} in the registry") from None

    def node(self, name: str) -> node_pb2_grpc.NodeAsyncStub:
        return node_pb2_grpc.NodeStub(self._channel(name))

    def storage(self) -> kv_pb2_grpc.BlockStoreAsyncStub:
        return kv_pb2_grpc.BlockStoreStub(self._channel("storage"))

    def scheduler(self) -> scheduler_pb2_grpc.SchedulerAsyncStub:
        return scheduler_pb2_grpc.SchedulerStub(self._channel("scheduler"))

    async def close(self) -> None:
        for ch in [*self._channels.values(), *self._retired]:
            await ch.close(grace=None)
        self._channels.clear()
        self._retired.clear()
        self._addrs.clear()
