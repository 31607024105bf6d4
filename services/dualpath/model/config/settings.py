"""One settings tree for a scenario: defaults and help are defined here once (the run's
sections and the whole `Scenario` here, the cluster's sections in sections.py).

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

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from dualpath.model.config.sections import (
    Engine,
    Fidelity,
    Hardware,
    Limits,
    Policy,
    Tier,
    Topology,
    VirtualLanes,
    _Section,
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


class FrontDoor(_Section):
    """The process runtime's HTTP front door (docs/frontdoor.md)."""

    tokenizer: str | None = Field(
        None,
        description="count prompts and spell the output with this tokenizer: a tokenizer.json, "
        "a folder holding one, or a Hugging Face model in the local cache (nothing is "
        "downloaded); default: the offline stand-in, whose output words are one token each "
        "under common BPE and WordPiece vocabularies",
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
