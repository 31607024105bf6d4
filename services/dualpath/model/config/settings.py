"""One settings tree for a scenario: defaults and help are defined here once.

Sources, lowest to highest precedence: field defaults < preset YAML < environment
(`DP_` prefix, `__` between levels, e.g. `DP_HARDWARE__SNIC_GBPS=200`) < CLI flags and
`--set path.to.key=value`. Units are the ones people quote (Gb/s for NICs, GB/s for DRAM
and storage, GB for capacities); `core` code converts to bytes once, at the edge.

Every number is finite and bounded here, once, so that a typo (`inf`, an extra zero, a
negative seed) is refused with the field's name before anything runs instead of surfacing as
a traceback deep in the links or an emulation that never ends. Bounds that only guard against
runaway work (not physics) live in `limits`, which a user may raise on purpose.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

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


class Workload(_Section):
    mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: `agents` start together, result = JCT; online: Poisson "
        "arrivals at `online.aps`, result = latencies under the paper's stop rule",
    )
    # agents' upper bound is limits.max_agents (a guard against runaway work, liftable).
    agents: int = Field(16, ge=1, description="offline: agents that start together")
    max_len: str = Field("64k", description="maximum agent context length: 32k, 48k or 64k")
    # The paper sweeps appends x1..x3; x100 already outgrows every GPU's HBM, and 1e300
    # overflows the generator's integer token counts.
    append_scale: float = Field(
        1.0, gt=0, le=100, description="multiplies every turn's append (tool output) length"
    )
    gen_scale: float = Field(
        1.0, gt=0, le=100, description="multiplies every turn's generated length"
    )
    source: str = Field(
        "synthetic",
        description="where the agent scripts come from: synthetic (Table 2), weka or mooncake "
        "(a trace at `trace`); see docs/traces.md",
    )
    trace: str | None = Field(
        None, description="trace file or folder (required for the trace sources)"
    )
    replay: Literal["session", "open-loop"] = Field(
        "session",
        description="session: each session's turns in order, after its think times; "
        "open-loop: every request at its own trace time (trace sources only)",
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1000,  # a trace's hours become weeks of emulated time beyond this
        description="multiplies every trace time (think, arrival)",
    )
    trace_sessions: int | None = Field(None, ge=1, description="load only the first N sessions")
    trace_requests: int | None = Field(
        None, ge=1, description="load only the first N requests (whole trace, arrival order)"
    )
    trace_turns: int | None = Field(
        None, ge=1, description="replay only each session's first N turns"
    )
    subagents: bool = Field(
        True, description="WEKA: merge sub-agent requests into their session by time (or drop)"
    )

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if v == "synthetic":  # the default: settings load without importing the loaders
            return v
        from dualpath.model.config.workload_sources import find_source

        find_source(v)  # unknown, or a skipped plug-in's name: says which and why
        return v

    @model_validator(mode="after")
    def _trace_given(self) -> Workload:
        if self.source != "synthetic" and self.trace is None:
            from dualpath.model.config.workload_sources import find_source

            src = find_source(self.source)
            if src.needs_trace:
                raise ValueError(f"source={self.source} needs `trace`: the trace's file or folder")
            if src.check_max_len is not None:  # sources fitted to some Table 2 rows only
                from dualpath.model.workload.table2 import parse_max_len

                src.check_max_len(parse_max_len(self.max_len))
        return self


class Online(_Section):
    """Online serving (paper §7.4). Defaults are the paper's."""

    # aps x max_duration_s (the expected arrivals) is bounded by limits.max_agents.
    aps: float = Field(0.1, gt=0, description="agent arrivals per second (Poisson)")
    think_time_s: float = Field(
        0.0, ge=0, le=86_400, description="tool-call time between an agent's turns"
    )
    slo_ttft_s: float = Field(4.0, gt=0, description="SLO: time to first token, seconds")
    slo_tpot_ms: float = Field(50.0, gt=0, description="SLO: time per output token, ms")
    # Floors on the stop rule's periods: a 1e-9 s check interval or window is an event storm.
    window_s: float = Field(
        150.0, ge=1, le=604_800, description="sliding window of the stop rule, seconds"
    )
    lookback_s: float = Field(
        1800.0,
        ge=1,
        le=604_800,
        description="steady state: compare with the window this much earlier",
    )
    steady_tolerance: float = Field(0.05, gt=0, description="steady when within this fraction")
    max_duration_s: float = Field(
        7200.0,
        gt=0,
        le=604_800,  # a week; the arrivals are drawn up front, sized by this
        description="stop anyway after this much emulated time (reported)",
    )
    check_interval_s: float = Field(
        10.0, ge=0.1, le=3600, description="how often the stop rule is checked"
    )


class Faults(_Section):
    corrupt_blocks: int = Field(0, ge=0, description="persisted blocks to corrupt (self-test)")
    schedule: list[str] = Field(
        default_factory=list,
        description="faults at emulated times, KIND[:TARGET[.LINK=GBPS]]@AT[+FOR], e.g. "
        "kill:decode0@10+5, pause:prefill0@5+2, degrade:prefill0.snic=40@0+300, "
        "redis-drop@20+3 (docs/faults.md); virtual time applies degrade only",
    )

    @field_validator("schedule")
    @classmethod
    def _parse_schedule(cls, v: list[str]) -> list[str]:
        from dualpath.model.faults.spec import parse

        for spec in v:
            parse(spec)  # FaultError (a ValueError) names the fault and the syntax
        return v


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


class FrontDoor(_Section):
    """The process runtime's HTTP front door (docs/frontdoor.md)."""

    tokenizer: str | None = Field(
        None,
        description="count prompts and spell the output with this tokenizer: a tokenizer.json, "
        "a folder holding one, or a Hugging Face model in the local cache (nothing is "
        "downloaded); default: the offline stand-in, whose output words are one token each "
        "under common BPE and WordPiece vocabularies",
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


class Scenario(BaseSettings):
    """A fully resolved emulation scenario."""

    model_config = SettingsConfigDict(
        env_prefix="DP_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    name: str = "custom"
    model: str = Field("ds-27b", description="model profile name or YAML path")
    gpu: str = Field("h800", description="GPU profile name or YAML path")
    seed: int = Field(0, ge=0, description="seeds every random draw of the run")
    topology: Topology = Topology()
    hardware: Hardware = Hardware()
    vl: VirtualLanes = VirtualLanes()
    engine: Engine = Engine()
    policy: Policy = Policy()
    workload: Workload = Workload()
    online: Online = Online()
    faults: Faults = Faults()
    fidelity: Fidelity = Fidelity()
    frontdoor: FrontDoor = FrontDoor()
    tier: Tier = Tier()
    limits: Limits = Limits()

    @model_validator(mode="after")
    def _within_limits(self) -> Scenario:
        lim, t, w = self.limits, self.topology, self.workload
        engines = (t.prefill_nodes + t.decode_nodes) * t.gpus_per_node
        if engines > lim.max_engines:
            raise ValueError(
                f"topology.prefill_nodes + decode_nodes = {t.prefill_nodes + t.decode_nodes} "
                f"nodes x {t.gpus_per_node} GPUs = {engines} engines, more than "
                f"limits.max_engines={lim.max_engines} (the paper's largest cluster has 1152); "
                "raise limits.max_engines to emulate a larger cluster"
            )
        if w.agents > lim.max_agents:
            raise ValueError(
                f"workload.agents={w.agents} is more than limits.max_agents={lim.max_agents} "
                "(each agent's script, ~20 KB, is built before the run starts); raise "
                "limits.max_agents to run that many"
            )
        arrivals = self.online.aps * self.online.max_duration_s
        if w.mode == "online" and arrivals > lim.max_agents:
            raise ValueError(
                f"online.aps={self.online.aps:g} x online.max_duration_s="
                f"{self.online.max_duration_s:g} = {arrivals:.3g} expected arrivals, more than "
                f"limits.max_agents={lim.max_agents}; lower either, or raise limits.max_agents"
            )
        return self

    @model_validator(mode="after")
    def _fault_targets(self) -> Scenario:
        from dualpath.model.faults.spec import check_targets, parse_all

        t = self.topology
        nodes = [f"prefill{i}" for i in range(t.prefill_nodes)]
        nodes += [f"decode{i}" for i in range(t.decode_nodes)]
        try:
            check_targets(parse_all(self.faults.schedule), nodes)
        except ValueError as exc:
            raise ValueError(f"faults.schedule: {exc}") from None
        return self


class _DictSource(PydanticBaseSettingsSource):
    """A preset (already parsed YAML) as the lowest-precedence non-default source."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def build_scenario(preset: dict[str, Any], overrides: dict[str, Any]) -> Scenario:
    """Resolve preset < env < overrides into a frozen Scenario (raises ValidationError)."""

    class _Resolved(Scenario):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, _DictSource(settings_cls, preset))

    resolved = _Resolved(**overrides)
    return Scenario.model_validate(resolved.model_dump())
