"""gRPC channels to the other services of a run, found through the Redis registry."""

from __future__ import annotations

from typing import Any

import grpc

from dualpath.control import Member
from dualpath.rpc.v1 import kv_pb2_grpc, node_pb2_grpc, scheduler_pb2_grpc

# KV payload chunks are ≤ 1 MiB, but real-payload writes can batch several blocks.
MAX_MESSAGE_BYTES = 80 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
]


Ctx = grpc.aio.ServicerContext[Any, Any]


class UnknownPeerError(LookupError):
    pass


class Peers:
    """One channel per peer service (by registry name: storage, scheduler, prefill0, ...)."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._addrs: dict[str, str] = {}
        self.members: dict[str, Member] = {}

    def update(self, members: list[Member]) -> None:
        for m in members:
            self.members[m.name] = m
            if self._addrs.get(m.name) != m.grpc_addr:
                self._addrs[m.name] = m.grpc_addr
                self._channels[m.name] = grpc.aio.insecure_channel(
                    m.grpc_addr, options=CHANNEL_OPTIONS
                )

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
        for ch in self._channels.values():
            await ch.close(grace=None)
        self._channels.clear()
        self._addrs.clear()
