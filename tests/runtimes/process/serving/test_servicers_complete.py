"""The generated servicer bases raise NotImplementedError for every RPC; each service shell
must override every method its proto declares, so none of those placeholders is reachable."""

from __future__ import annotations

import pytest

from dualpath.rpc.v1 import (
    kv_pb2,
    kv_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from dualpath.runtimes.process.serving.node import NodeShell
from dualpath.runtimes.process.serving.scheduler import SchedulerShell
from dualpath.runtimes.process.serving.storage import StorageShell


@pytest.mark.parametrize(
    ("shell", "base", "module", "service"),
    [
        (StorageShell, kv_pb2_grpc.BlockStoreServicer, kv_pb2, "BlockStore"),
        (NodeShell, node_pb2_grpc.NodeServicer, node_pb2, "Node"),
        (SchedulerShell, scheduler_pb2_grpc.SchedulerServicer, scheduler_pb2, "Scheduler"),
    ],
)
def test_every_rpc_is_implemented(shell: type, base: type, module: object, service: str) -> None:
    methods = [m.name for m in module.DESCRIPTOR.services_by_name[service].methods]  # type: ignore[attr-defined]
    assert methods
    missing = [m for m in methods if getattr(shell, m) is getattr(base, m)]
    assert not missing, f"{shell.__name__} leaves {missing} to the generated placeholder"
