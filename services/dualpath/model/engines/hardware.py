"""The emulated hardware one cluster runs on: links per node and GPU, capacities, and
the paths KV bytes take (docs/engines.md; docs/links.md, "Emulated hardware"). Every helper
returns the hop list of one transfer so that every hop is charged."""

from __future__ import annotations

from dataclasses import dataclass, field

from dualpath.model.engines.capacity import CapacityPool
from dualpath.model.entities.request import EngineState, NodeState
from dualpath.model.links import Fabric, Link, VlArbitration

GBPS_TO_BYTES = 1e9 / 8  # Gb/s -> bytes/s
GBS_TO_BYTES = 1e9  # GB/s -> bytes/s


@dataclass(slots=True, eq=False)
class NodeHw:
    state: NodeState
    snic_rx: Link  # storage -> node (KV reads)
    snic_tx: Link  # node -> storage (KV persists)
    dram: Link  # half-duplex: reads and writes share it
    buffer: CapacityPool  # DRAM set aside for PE/DE KV buffers


@dataclass(slots=True, eq=False)
class GpuHw:
    engine: EngineState
    cnic_rx: Link  # into the GPU (incl. H2D loopback)
    cnic_tx: Link  # out of the GPU (incl. D2H loopback)
    kv_hbm: float  # HBM bytes left for KV after weights and workspace


@dataclass(slots=True, eq=False)
class Hardware:
    fabric: Fabric
    storage_read: Link
    storage_write: Link
    nodes: dict[str, NodeHw] = field(default_factory=dict)
    gpus: dict[str, GpuHw] = field(default_factory=dict)
    targets: list[Link] = field(default_factory=list)  # per-target read queues of the store
    node_gpus: dict[str, list[GpuHw]] = field(default_factory=dict)  # cache of _cnic_of

    def node_of(self, engine: EngineState) -> NodeHw:
        return self.nodes[engine.node.name]

    def gpu_of(self, engine: EngineState) -> GpuHw:
        return self.gpus[engine.engine_id]

    # --- hop lists (every KV byte is charged on each) ---------------------------------
    def storage_read_hops(self, node: NodeState, target: int) -> list[Link]:
        n = self.nodes[node.name]
        # The targets partition the aggregate: charging both would only cost events.
        head = [self.targets[target]] if self.targets else [self.storage_read]
        return [*head, n.snic_rx, n.dram]

    def persist_hops(self, de: EngineState) -> list[Link]:
        """DE HBM -> (D2H through its CNIC) -> DRAM -> SNIC -> storage."""
        n, g = self.node_of(de), self.gpu_of(de)
        return [g.cnic_tx, n.dram, n.snic_tx, self.storage_write]

    def h2d_hops(self, engine: EngineState) -> list[Link]:
        """Local buffer -> HBM through the GPU's own CNIC (loopback)."""
        return [self.node_of(engine).dram, self.gpu_of(engine).cnic_rx]

    def remote_load_hops(self, src: EngineState, dst: EngineState) -> list[Link]:
        """DE buffer -> DE CNIC -> PE CNIC -> PE HBM (DE read path)."""
        return [self.node_of(src).dram, self.gpu_of(src).cnic_tx, self.gpu_of(dst).cnic_rx]

    def tier_remote_hops(self, src: NodeState, dst: NodeState, lane: int) -> list[Link]:
        """Another node's DRAM tier -> this node's DRAM buffer over RDMA (a Mooncake-store
        pool): out of the source node through one of its GPUs' CNICs, into the reading
        node through one of its own. `lane` picks the GPU on each node (spreads sessions)."""
        s, d = self.nodes[src.name], self.nodes[dst.name]
        return [s.dram, self._cnic_of(src, lane).cnic_tx, self._cnic_of(dst, lane).cnic_rx, d.dram]

    def _cnic_of(self, node: NodeState, lane: int) -> GpuHw:
        gpus = self.node_gpus.get(node.name)
        if gpus is None:  # built once: GPUs never change after the cluster is wired
            gpus = self.node_gpus[node.name] = [
                g for g in self.gpus.values() if g.engine.node.name == node.name
            ]
        return gpus[lane % len(gpus)]

    def kv_out_hops(self, pe: EngineState, de: EngineState) -> list[Link]:
        """PE HBM -> PE CNIC -> DE CNIC -> DE DRAM buffer."""
        return [self.gpu_of(pe).cnic_tx, self.gpu_of(de).cnic_rx, self.node_of(de).dram]


def add_node(
    hw: Hardware,
    state: NodeState,
    snic_bps: float,
    dram_bps: float,
    buffer_bytes: float,
    *,
    read_efficiency: float = 1.0,
) -> NodeHw:
    """`read_efficiency`: the fraction of the SNIC line rate storage reads reach (3FS's
    client-side overheads; persists are not derated, no source gives their figure)."""
    f = hw.fabric
    node = NodeHw(
        state=state,
        snic_rx=f.add_link(f"{state.name}.snic.rx", snic_bps * read_efficiency),
        snic_tx=f.add_link(f"{state.name}.snic.tx", snic_bps),
        dram=f.add_link(f"{state.name}.dram", dram_bps),
        buffer=CapacityPool(f"{state.name}.buffer", buffer_bytes),
    )
    hw.nodes[state.name] = node
    return node


def add_gpu(
    hw: Hardware, engine: EngineState, cnic_bps: float, vl: VlArbitration, hbm_bytes: float
) -> GpuHw:
    f = hw.fabric
    gpu = GpuHw(
        engine=engine,
        cnic_rx=f.add_link(f"{engine.engine_id}.cnic.rx", cnic_bps, vl),
        cnic_tx=f.add_link(f"{engine.engine_id}.cnic.tx", cnic_bps, vl),
        kv_hbm=hbm_bytes,
    )
    hw.gpus[engine.engine_id] = gpu
    return gpu
