"""Collaborators every engine shares, built once by the composition root."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from dualpath.model.blocks import BlockStore, ChainRegistry
from dualpath.model.blocks.tier import TierSet
from dualpath.model.config.sections import Engine, VirtualLanes
from dualpath.model.core.clock import Clock
from dualpath.model.core.virtual_core import Timing, timing_of
from dualpath.model.engines.hardware import Hardware
from dualpath.model.entities.metrics import Metrics
from dualpath.model.entities.request import Request
from dualpath.model.links import Link
from dualpath.model.policies.base import SchedulingPolicy
from dualpath.model.roofline import Roofline


@dataclass(slots=True, eq=False)
class FaultPlan:
    """Faults injected on purpose (a detector self-test), shared by all engines."""

    corrupt_left: int = 0  # persisted blocks still to corrupt in the store


@dataclass(slots=True, eq=False)
class EngineContext:
    clock: Clock
    hw: Hardware
    roofline: Roofline
    store: BlockStore
    chains: ChainRegistry
    metrics: Metrics
    policy: SchedulingPolicy
    engine: Engine
    vl: VirtualLanes
    layer_groups: list[int]  # layers per emulated step, summing to the model's layers
    full_block_bytes: int
    kv_token_layer: int  # KV bytes per token per layer
    kv_token: int  # KV bytes per token, all layers
    faults: FaultPlan
    gpus_per_node: int
    # fidelity.de_buffer_for_pe_reads == "after-read": a PE-path read takes its DE buffer
    # space once it is in the PE buffer, not before it starts (docs/fidelity.md).
    de_buffer_after_pe_read: bool = False
    # fidelity.handover == "per-forward": a forward's prefilled turns reach their DEs together,
    # once all of the forward's KV is in the DE buffers (docs/fidelity.md).
    handover_per_forward: bool = False
    # Where transfers start: the fabric itself in one process; in the process runtime a
    # transport that charges local hops here and remote hops in their owners' processes.
    transport: Transport | None = None
    # The host-DRAM KV tier of every node (docs/tier.md); None: off (the default).
    tier: TierSet | None = None
    # `clock`'s now and call_at, native calls on the virtual core when compiled (timing_of)
    timing: Timing = field(init=False)
    # Settings the engines read per event, copied once into native fields: a field of a
    # settings model (pydantic) or a policy's class attribute is a generic attribute
    # lookup in a compiled build (about 1 % of a compiled 2P4D run in all).
    kv_vl: int = field(init=False)
    model_vl: int = field(init=False)
    chunk_steps: int = field(init=False)  # engine.decode_chunk_steps
    block_tokens: int = field(init=False)
    oracle: bool = field(init=False)  # policy.oracle: all KV I/O takes zero time

    def __post_init__(self) -> None:
        self.timing = timing_of(self.clock)
        self.kv_vl = self.vl.kv_vl
        self.model_vl = self.vl.model_vl
        self.chunk_steps = self.engine.decode_chunk_steps
        self.block_tokens = self.engine.block_tokens
        self.oracle = self.policy.oracle

    def a2a_bytes(self, tokens: int, n_layers: int) -> float:
        """Expert all-to-all bytes one GPU puts on its CNIC for `tokens` over `n_layers`.

        DeepEP sends a token once per remote node and fans out over NVLink inside the node,
        so only the RDMA share crosses the CNIC (0 when the EP group is a single node).
        """
        rl = self.roofline
        per_layer = rl.a2a_rdma_bytes_per_layer(tokens, self.gpus_per_node)
        return per_layer * n_layers * rl.moe_layers / rl.layers

    def move(self, nbytes: float, hops: list[Link], vl: int, on_done: Callable[[], None]) -> None:
        """Start a KV transfer; the Oracle baseline moves KV in zero time."""
        if self.oracle or nbytes <= 0:
            timing = self.timing
            timing.call_at(timing.now(), on_done)
            return
        transport = self.transport
        if transport is None:  # typed: a native call in a compiled build, not a generic one
            self.hw.fabric.start(nbytes, hops, vl, on_done)
        else:
            transport.start(nbytes, hops, vl, on_done)


class Transport(Protocol):
    """Starts a transfer of `nbytes` over `hops`; calls `on_done` when every hop is done."""

    def start(
        self, nbytes: float, hops: list[Link], vl: int, on_done: Callable[[], None] | None = None
    ) -> object: ...


RequestHook = Callable[[Request], None]
