"""The cluster's sections of the settings tree: topology, hardware, virtual lanes, engines,
policy, fidelity choices, the DRAM tier and the runaway-work limits (settings.py holds the
run's sections, the whole `Scenario` and how it is resolved; it re-exports these).

Every number is finite and bounded here, once, so that a typo is refused with the field's
name before anything runs (settings.py says why).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_DATA_VL = 14  # VL15 is InfiniBand's management lane
MAX_VL_WEIGHT = 255  # arbitration weights are 8-bit


class _Section(BaseModel):
    # allow_inf_nan=False: an infinite bandwidth or a NaN scale only fails later, far from
    # the setting that caused it (e.g. as an int overflow in the workload generator).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Topology(_Section):
    # The node counts' upper bound is on their product with gpus_per_node: limits.max_engines.
    prefill_nodes: int = Field(1, ge=1, description="nodes running prefill engines (P)")
    decode_nodes: int = Field(1, ge=1, description="nodes running decode engines (D)")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs (= engines) per node (g)")
    prefill_group_nodes: int = Field(
        0, ge=0, description="nodes per prefill engine group (EP domain); 0 = all prefill nodes"
    )
    decode_group_nodes: int = Field(
        0, ge=0, description="nodes per decode engine group (EP domain); 0 = all decode nodes"
    )


class Hardware(_Section):
    # Bandwidths have a floor: emulated time (and the report's per-second series) grows as
    # bandwidth shrinks, so a NIC of 1e-300 Gb/s never finishes; ceilings keep byte rates
    # finite after unit conversion (1e300 Gb/s overflows to inf bytes/s).
    snic_gbps: float = Field(
        400.0, ge=1, le=100_000, description="storage NIC per node, each direction, Gb/s"
    )
    cnic_gbps: float = Field(
        400.0, ge=1, le=100_000, description="compute NIC per GPU, each direction, Gb/s"
    )
    dram_gbs: float = Field(
        500.0, ge=1, le=100_000, description="host DRAM per node, reads+writes, GB/s"
    )
    dram_buffer_gb: float = Field(
        80.0, gt=0, le=100_000, description="DRAM for PE/DE KV buffers per node, GB"
    )
    hbm_gb: float | None = Field(
        None, gt=0, le=10_000, description="HBM per GPU, GB (default: GPU profile)"
    )
    hbm_reserve_gb: float = Field(
        4.0, ge=0, le=10_000, description="HBM kept for activations and workspace, GB per GPU"
    )
    hbm_reserve_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="HBM kept out of the weights + KV pool as a fraction of the GPU's HBM "
        "(the larger of this and hbm_reserve_gb applies); 0 = off. The DeepSeek presets set "
        "0.15: SGLang's DeepSeek-V3 PD + large-scale EP deployment runs prefill at "
        "mem_fraction_static 0.85 and decode at 0.846 (docs/sources.md S32)",
    )
    storage_gbs: float | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="storage service aggregate read (and write) GB/s; default 1.5 x sum SNIC",
    )
    storage_targets: int = Field(
        8,
        ge=0,
        le=1024,  # each target is a link of its own, shared by every read it serves
        description="storage targets, each with its own read queue (0 = aggregate only)",
    )


class VirtualLanes(_Section):
    isolation: bool = Field(True, description="InfiniBand VL QoS on the CNICs (paper §5.1)")
    high: dict[int, int] = Field(default_factory=lambda: {0: 192, 1: 192, 2: 0, 3: 192})
    low: dict[int, int] = Field(default_factory=lambda: {0: 192, 1: 192, 2: 64, 3: 192})
    high_limit: int = Field(240, ge=0, le=255, description="qos_high_limit, 4 KB units")
    mtu_bytes: int = Field(4096, gt=0)
    kv_vl: int = Field(2, ge=0, le=MAX_DATA_VL, description="VL carrying KV-cache transfers")
    model_vl: int = Field(0, ge=0, le=MAX_DATA_VL, description="VL carrying expert all-to-all")

    @model_validator(mode="after")
    def _arbitration(self) -> VirtualLanes:
        """IBA table rules (links.arbitration checks them again when it builds the arbiter;
        repeated here so a bad table is a settings error, without importing the fabric):
        data VLs 0..14, weights 0..255, and the KV and model VLs must have a weight, or
        their traffic is never sent and the run stalls."""
        for name, table in (("high", self.high), ("low", self.low)):
            for vl, weight in table.items():
                if not 0 <= vl <= MAX_DATA_VL:
                    raise ValueError(f"vl.{name}: VL {vl} is not a data VL (0..{MAX_DATA_VL})")
                if not 0 <= weight <= MAX_VL_WEIGHT:
                    raise ValueError(
                        f"vl.{name}: VL {vl} weight {weight} outside 0..{MAX_VL_WEIGHT}"
                    )
        if self.isolation:
            served = {vl for t in (self.high, self.low) for vl, w in t.items() if w > 0}
            for key, vl in (("kv_vl", self.kv_vl), ("model_vl", self.model_vl)):
                if vl not in served:
                    raise ValueError(
                        f"vl.{key}={vl}: VL {vl} has no weight in vl.high or vl.low, so its "
                        "traffic would never be sent; give it a weight or pick a listed VL"
                    )
        return self


class Engine(_Section):
    block_tokens: int = Field(64, ge=1, description="tokens per KV block")
    layer_group: int = Field(
        64,
        ge=1,
        description="layers coalesced into one emulated step (1 = per layer); timed as the "
        "per-layer pipeline, see docs/engines.md",
    )
    # A quota far below one token's attention time chunks every prompt into one-token
    # forwards: millions of events for one turn.
    compute_quota_ms: float = Field(
        300.0, ge=1, le=60_000, description="PE attention-time cap per forward"
    )
    # Running-request caps of serving engines (vLLM max_num_seqs, SGLang
    # max_running_requests; docs/fidelity.md). None: only the quota and HBM bound a batch.
    max_running_prefill: int | None = Field(
        None, ge=1, description="requests per prefill forward per GPU (None = no cap)"
    )
    max_running_decode: int | None = Field(
        None, ge=1, description="requests resident on one decode GPU (None = no cap)"
    )
    decode_chunk_steps: int = Field(
        16, ge=1, description="decode steps coalesced into one event when the batch is stable"
    )
    # periodic mode polls on this period whether or not anything changed: 1e-9 ms is an
    # event storm, and a huge period lets the clock run past every turn before a fetch.
    fetch_interval_ms: float = Field(
        5.0, ge=0.1, le=1000, description="a group leader's fetch period"
    )
    # per-forward: a serving engine's loop takes new requests between its forwards (SGLang's
    # PD prefill loop, docs/sources.md S33); on-change's 5 ms inside a forward has no source.
    fetch_mode: Literal["on-change", "periodic", "per-forward"] = Field(
        "per-forward",
        description="per-forward: a PE group mid-forward fetches only when the forward ends, "
        "otherwise as on-change; on-change: skip polls where nothing changed for the group "
        "(same decisions as periodic, fewer events); periodic: poll every interval",
    )


class Policy(_Section):
    name: str = Field("dualpath", description="scheduling policy (see `dualpath policies`)")
    # An hour at most: α and β are token counts derived from these, and 1e300 s overflows.
    alpha_s: float = Field(
        3.0, gt=0, le=3600, description="α = tokens a node's SNIC reads in this time"
    )
    beta_s: float = Field(
        5.0, gt=0, le=3600, description="β = tokens one GPU processes in this time"
    )
    alpha_tokens: int | None = Field(None, gt=0, description="override α directly, tokens")
    beta_tokens: int | None = Field(None, gt=0, description="override β directly, tokens")
    z_factor: float = Field(
        1.05, gt=0, le=1000, description="DE high-token threshold Z = factor × mean tokens per DE"
    )
    path_tie: Literal["pe", "de"] = Field(
        "de",
        description="read side when the PE and DE nodes' read queues are equal (the paper "
        "does not say; see docs/scheduling.md)",
    )


class Fidelity(_Section):
    """Modelling choices the paper leaves open or that a primary source decides (issue 12's
    audit, docs/fidelity.md). Defaults follow the sources; flip one to see its effect alone."""

    kv_indexer_cached: bool = Field(
        True,
        description="DSA models: the lightning indexer's FP8 keys + scale (132 B/token/layer) "
        "are cached, stored and moved with the KV (DeepSeek-V3.2 inference code, FlashMLA cache "
        "layout); Table 1 keeps the paper's definition without them",
    )
    storage_read_efficiency: float = Field(
        0.86,
        gt=0,
        le=1,
        description="fraction of the SNIC line rate a storage read achieves: 3FS's KVCache "
        "peak is ~40 GiB/s per client with one 400 Gbps NIC (0.86); 1 = line rate",
    )
    de_buffer_for_pe_reads: Literal["before-read", "after-read"] = Field(
        "before-read",
        description="when a PE-path read reserves its prompt's KV in the DE DRAM buffer: "
        "before the read starts (every read holds DE buffer from placement on), or once the "
        "read is in the PE buffer (the DE buffer receives the KV only from prefill on); the "
        "paper does not say. after-read runs on virtual time only",
    )
    handover: Literal["per-destination", "per-forward"] = Field(
        "per-destination",
        description="when a prefilled turn is handed to its DE: once its own KV is in the DE "
        "buffer (the KV flows from its PE GPU to its DE GPU; SGLang's decode side polls each "
        "request's transfer), or once every KV flow of the prefill forward it ended in is "
        "(before stop 39)",
    )


class Tier(_Section):
    """A host-DRAM KV tier on every node (docs/tier.md). 0 bytes (the default) = no tier:
    every run is exactly as without it."""

    dram_bytes_per_node: float = Field(
        0.0,
        ge=0,
        le=1e15,
        description="host DRAM per node kept as a KV cache tier, bytes, besides the read/"
        "transfer buffers; 0 = off. SGL(MC) ran with 1.5 TB per node (1.5e12, paper A.4)",
    )
    eviction: Literal["lru", "lfu"] = Field(
        "lru",
        description="victim session when the tier is full (its tail blocks go first): lru = "
        "least recently matched or filled; lfu = fewest matches, lru on a tie (SGLang "
        "--radix-eviction-policy)",
    )
    remote_hits: bool = Field(
        True,
        description="a read may take blocks another node's tier holds, over both nodes' "
        "compute NICs (a Mooncake-store-like DRAM pool)",
    )


class Limits(_Section):
    """Guard rails against scenarios that would run for hours or exhaust memory before they
    report anything (usually a typo: an extra zero). Unlike the other bounds these are not
    physics: raise one on purpose with `--set limits.KEY=N` when a scenario really is that big.
    """

    max_engines: int = Field(
        8192,
        ge=1,
        description="(prefill_nodes + decode_nodes) x gpus_per_node; the paper's largest "
        "cluster (48P96D) has 1152, and every scheduling decision scans the engines",
    )
    max_agents: int = Field(
        100_000,
        ge=1,
        description="workload.agents, and online the expected arrivals aps x max_duration_s; "
        "every agent's script (~20 KB) is built before the run starts",
    )
    max_processes: int = Field(
        64,
        ge=4,
        description="dualpath up/run: processes of the local cluster (one per node, plus "
        "storage and scheduler), each a Python interpreter of its own",
    )
