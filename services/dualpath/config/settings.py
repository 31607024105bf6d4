"""One settings tree for a scenario: defaults and help are defined here once.

Sources, lowest to highest precedence: field defaults < preset YAML < environment
(`DP_` prefix, `__` between levels, e.g. `DP_HARDWARE__SNIC_GBPS=200`) < CLI flags and
`--set path.to.key=value`. Units are the ones people quote (Gb/s for NICs, GB/s for DRAM
and storage, GB for capacities); `core` code converts to bytes once, at the edge.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Topology(_Section):
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
    snic_gbps: float = Field(400.0, gt=0, description="storage NIC per node, each direction, Gb/s")
    cnic_gbps: float = Field(400.0, gt=0, description="compute NIC per GPU, each direction, Gb/s")
    dram_gbs: float = Field(500.0, gt=0, description="host DRAM per node, reads+writes, GB/s")
    dram_buffer_gb: float = Field(80.0, gt=0, description="DRAM for PE/DE KV buffers per node, GB")
    hbm_gb: float | None = Field(None, gt=0, description="HBM per GPU, GB (default: GPU profile)")
    hbm_reserve_gb: float = Field(
        4.0, ge=0, description="HBM kept for activations and workspace, GB per GPU"
    )
    storage_gbs: float | None = Field(
        None,
        gt=0,
        description="storage service aggregate read (and write) GB/s; default 1.5 x sum SNIC",
    )
    storage_targets: int = Field(
        8, ge=0, description="storage targets, each with its own read queue (0 = aggregate only)"
    )


class VirtualLanes(_Section):
    isolation: bool = Field(True, description="InfiniBand VL QoS on the CNICs (paper §5.1)")
    high: dict[int, int] = Field(default_factory=lambda: {0: 192, 1: 192, 2: 0, 3: 192})
    low: dict[int, int] = Field(default_factory=lambda: {0: 192, 1: 192, 2: 64, 3: 192})
    high_limit: int = Field(240, ge=0, le=255, description="qos_high_limit, 4 KB units")
    mtu_bytes: int = Field(4096, gt=0)
    kv_vl: int = Field(2, ge=0, le=14, description="VL carrying KV-cache transfers")
    model_vl: int = Field(0, ge=0, le=14, description="VL carrying expert all-to-all")


class Engine(_Section):
    block_tokens: int = Field(64, ge=1, description="tokens per KV block")
    layer_group: int = Field(
        64,
        ge=1,
        description="layers coalesced into one emulated step (1 = per layer); timed as the "
        "per-layer pipeline, see docs/engines.md",
    )
    compute_quota_ms: float = Field(300.0, gt=0, description="PE attention-time cap per forward")
    decode_chunk_steps: int = Field(
        16, ge=1, description="decode steps coalesced into one event when the batch is stable"
    )
    fetch_interval_ms: float = Field(5.0, gt=0, description="a group leader's fetch period")
    fetch_mode: Literal["on-change", "periodic"] = Field(
        "on-change",
        description="periodic: poll every interval; on-change: skip polls where nothing "
        "changed for the group (same decisions, fewer events)",
    )


class Policy(_Section):
    name: str = Field("dualpath", description="scheduling policy (see `dualpath policies`)")
    alpha_s: float = Field(3.0, gt=0, description="α = tokens a node's SNIC reads in this time")
    beta_s: float = Field(5.0, gt=0, description="β = tokens one GPU processes in this time")
    alpha_tokens: int | None = Field(None, gt=0, description="override α directly, tokens")
    beta_tokens: int | None = Field(None, gt=0, description="override β directly, tokens")
    z_factor: float = Field(
        1.05, gt=0, description="DE high-token threshold Z = factor × mean tokens per DE"
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
    agents: int = Field(16, ge=1, description="offline: agents that start together")
    max_len: str = Field("64k", description="maximum agent context length: 32k, 48k or 64k")
    append_scale: float = Field(1.0, gt=0)
    gen_scale: float = Field(1.0, gt=0)
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
        1.0, gt=0, allow_inf_nan=False, description="multiplies every trace time (think, arrival)"
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
        from dualpath.workload.sources import WORKLOAD_SOURCES, known_sources

        if v not in WORKLOAD_SOURCES:
            raise ValueError(f"unknown workload source {v!r}; known: {known_sources()}")
        return v

    @model_validator(mode="after")
    def _trace_given(self) -> Workload:
        if self.source != "synthetic" and self.trace is None:
            from dualpath.workload.sources import WORKLOAD_SOURCES

            if WORKLOAD_SOURCES[self.source].needs_trace:
                raise ValueError(f"source={self.source} needs `trace`: the trace's file or folder")
        return self


class Online(_Section):
    """Online serving (paper §7.4). Defaults are the paper's."""

    aps: float = Field(0.1, gt=0, description="agent arrivals per second (Poisson)")
    think_time_s: float = Field(0.0, ge=0, description="tool-call time between an agent's turns")
    slo_ttft_s: float = Field(4.0, gt=0, description="SLO: time to first token, seconds")
    slo_tpot_ms: float = Field(50.0, gt=0, description="SLO: time per output token, ms")
    window_s: float = Field(150.0, gt=0, description="sliding window of the stop rule, seconds")
    lookback_s: float = Field(
        1800.0, gt=0, description="steady state: compare with the window this much earlier"
    )
    steady_tolerance: float = Field(0.05, gt=0, description="steady when within this fraction")
    max_duration_s: float = Field(
        7200.0, gt=0, description="stop anyway after this much emulated time (reported)"
    )
    check_interval_s: float = Field(10.0, gt=0, description="how often the stop rule is checked")


class Faults(_Section):
    corrupt_blocks: int = Field(0, ge=0, description="persisted blocks to corrupt (self-test)")


class Scenario(BaseSettings):
    """A fully resolved emulation scenario."""

    model_config = SettingsConfigDict(
        env_prefix="DP_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    name: str = "custom"
    model: str = Field("ds-27b", description="model profile name or YAML path")
    gpu: str = Field("h800", description="GPU profile name or YAML path")
    seed: int = 0
    topology: Topology = Topology()
    hardware: Hardware = Hardware()
    vl: VirtualLanes = VirtualLanes()
    engine: Engine = Engine()
    policy: Policy = Policy()
    workload: Workload = Workload()
    online: Online = Online()
    faults: Faults = Faults()


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
