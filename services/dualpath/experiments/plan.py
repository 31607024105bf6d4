"""`dualpath plan`: the capacity planner as an experiment (docs/planner.md).

Stage 1 starts the `width` candidates with the best bounds (experiments/plan_bounds.py) at
their first probe; every later stage (`more`) gives each running candidate its next probe,
stops those whose bound fell below the best capacity measured so far, and starts the next
unpruned candidates, until `budget` candidates ran. A probe is one online run under the
paper's stop rule; its verdict and the bisection are the online-capacity experiment's
(`slo_met`, `bracket`, `next_midpoint`). Every stage is a function of the results alone, so
the runner resumes it from its cache and `--emit k8s` runs it as Indexed Jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from dualpath.experiments.base import Experiment, Results, RunSpec, Summary
from dualpath.experiments.extract import failed, jct, pick
from dualpath.experiments.online_capacity import bracket, next_midpoint, probes_under
from dualpath.experiments.plan_bounds import SampleWork, candidate_bound, sample_work
from dualpath.experiments.plan_search import (
    Bound,
    Candidate,
    Measured,
    Slo,
    by_bound,
    enumerate_candidates,
    prunable,
)
from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.cluster import TopologyError

NAME = "plan"
START = 0.5  # the first probe of a candidate, as a fraction of its bound
LOWEST = 1e-3  # no probe below this fraction of the bound: the candidate has no capacity
AT_BOUND = 0.999  # a passing probe this close to the bound ends the search upwards


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """What `dualpath plan` was asked (one field per flag, docs/planner.md)."""

    model: str
    gpu: str
    workload: str  # the Table 2 MaxLen: 32k, 48k or 64k
    slo: Slo
    gpus_max: int
    policies: tuple[str, ...]
    preset: str
    gpus_per_node: int
    ep_nodes: tuple[int, ...] = (0,)
    dram_bytes: tuple[float, ...] = (0.0,)
    duration_s: float = 3600.0
    window_s: float = 150.0
    lookback_s: float = 1800.0
    offline_agents: int | None = None
    objective: str = "online"  # offline: rank by agents/s of the offline JCT run (N / JCT)
    width: int = 4
    budget: int = 8
    probes: int = 6
    tolerance: float = 0.1
    seed: int = 0
    sample_agents: int = 64
    extra_sets: tuple[str, ...] = field(default=())

    def sets(self, c: Candidate, aps: float | None) -> list[str]:
        """The `--set` list of one run (`aps` None: the offline JCT run). `dualpath sim
        --preset PRESET --set ...` with exactly these reproduces it."""
        out = [
            f"model={self.model}", f"gpu={self.gpu}", f"seed={self.seed}",
            f"topology.prefill_nodes={c.prefill}", f"topology.decode_nodes={c.decode}",
            f"topology.gpus_per_node={c.gpus_per_node}", f"policy.name={c.policy}",
            f"workload.max_len={self.workload}",
        ]  # fmt: skip
        if c.ep_nodes:
            out += [f"topology.prefill_group_nodes={c.ep_nodes}",
                    f"topology.decode_group_nodes={c.ep_nodes}"]  # fmt: skip
        if c.dram_bytes:
            out.append(f"tier.dram_bytes_per_node={c.dram_bytes:.6g}")
        if aps is None:
            agents = self.offline_agents or self.sample_agents
            out += ["workload.mode=offline", f"workload.agents={agents}"]
        else:
            out += [
                "workload.mode=online", f"online.aps={aps:.6g}",
                f"online.slo_ttft_s={self.slo.ttft_s:g}",
                f"online.slo_tpot_ms={self.slo.tpot_s * 1e3:g}",
                f"online.max_duration_s={self.duration_s:g}", f"online.window_s={self.window_s:g}",
                f"online.lookback_s={self.lookback_s:g}",
            ]  # fmt: skip
        return out + list(self.extra_sets)

    def scenario(self, c: Candidate, aps: float | None) -> Scenario:
        return resolve(self.preset, {}, self.sets(c, aps))


def probe_key(c: Candidate, aps: float) -> str:
    return f"{c.key}-aps{aps:.4g}"


def offline_key(c: Candidate, agents: int) -> str:
    return f"{c.key}-offline-a{agents}"


def probes_of(c: Candidate, results: Results) -> dict[float, bool]:
    """APS -> SLO met, for the candidate's finished probes (failed runs left out)."""
    return probes_under(f"{c.key}-aps", results)


def next_aps(probes: dict[float, bool], bound: float, spec: PlanSpec) -> float | None:
    """The candidate's next probe, or None when its search is over: up by 2x while every
    probe passed (at most to the bound), down by 4x while every one failed, then the
    online-capacity bisection; at most `spec.probes` probes."""
    if len(probes) >= spec.probes:
        return None
    if not probes:
        return _round(bound * START)
    lo, hi = bracket(probes)
    if hi is None:  # every probe passed
        assert lo is not None
        return None if lo >= bound * AT_BOUND else _round(min(2 * lo, bound))
    if lo is None:  # every probe failed
        down = _round(min(probes) / 4)
        return None if down < bound * LOWEST else down
    return next_midpoint(lo, hi, spec.tolerance)


def _round(aps: float) -> float:
    """4 significant digits, never above `aps` (a probe capped at the bound stays below it)."""
    r = float(f"{aps:.4g}")
    return r if r <= aps else float(f"{aps - 0.5 * 10 ** (math.floor(math.log10(aps)) - 3):.4g}")


def capacity(c: Candidate, results: Results, spec: PlanSpec) -> float | None:
    """Online: the largest passing APS below the first failing one (online-capacity's rule).
    Offline: the offline run's agents per second, N / JCT (the bound holds for it too)."""
    if spec.objective == "offline":
        value = jct(results.get(offline_key(c, spec.offline_agents or 0)))
        return (spec.offline_agents or 0) / value if value else None
    return bracket(probes_of(c, results))[0]


class Plan(Experiment):
    """The planner's runs: see the module doc. Not in the experiment registry (it takes the
    plan's flags); `dualpath plan` builds it."""

    name = NAME
    title = "capacity planner: the best cluster per GPU under an SLO"

    def __init__(self, spec: PlanSpec) -> None:
        self.spec = spec

    @cached_property
    def work(self) -> SampleWork:
        s, c = self.spec, self.candidates[0]
        # offline: exactly the run's agents (same seed), so its bound is for its own work
        agents = s.offline_agents if s.objective == "offline" and s.offline_agents else None
        return sample_work(s.scenario(c, None), agents or s.sample_agents)

    @cached_property
    def candidates(self) -> list[Candidate]:
        s = self.spec
        return enumerate_candidates(s.gpus_max, s.gpus_per_node, s.policies,
                                    ep_nodes=s.ep_nodes, dram_bytes=s.dram_bytes)  # fmt: skip

    @cached_property
    def bounds(self) -> dict[str, Bound]:
        return {c.key: self._bound(c) for c in self.candidates}

    def prepare(self, hook: Callable[[int, int], None] | None = None) -> None:
        """Compute every candidate's bound now (`hook(done, total)`: progress)."""
        total = len(self.candidates)
        out: dict[str, Bound] = {}
        for i, c in enumerate(self.candidates):
            out[c.key] = self._bound(c)
            if hook is not None:
                hook(i + 1, total)
        self.__dict__["bounds"] = out  # the cached_property's value

    def _bound(self, c: Candidate) -> Bound:
        try:
            return candidate_bound(self.spec.scenario(c, None), self.work, self.spec.slo)
        except TopologyError as exc:  # e.g. the weights do not fit this EP group's HBM
            return Bound(0.0, str(exc), feasible=False)

    @cached_property
    def order(self) -> list[Candidate]:
        return by_bound(self.candidates, self.bounds)

    def _specs(self, c: Candidate, aps: float | None) -> RunSpec:
        agents = self.spec.offline_agents or 0
        key = probe_key(c, aps) if aps is not None else offline_key(c, agents)
        labels: dict[str, str | int | float] = {"candidate": c.key, "policy": c.policy,
                                                "topology": c.topo, "gpus": c.gpus}  # fmt: skip
        if aps is not None:
            labels["aps"] = aps
        return RunSpec(key, self.spec.scenario(c, aps), labels)

    def _start(self, c: Candidate) -> list[RunSpec]:
        first = next_aps({}, self.bounds[c.key].aps, self.spec)
        online = first is not None and self.spec.objective == "online"
        out = [self._specs(c, first)] if online else []
        if self.spec.offline_agents:
            out.append(self._specs(c, None))
        return out

    def walk(self, results: Results) -> Walk:
        """Where the search stands given `results` (pure: the same results, the same walk)."""
        return walk(self, results)

    def plan(self, quick: bool) -> list[RunSpec]:
        return self.more(quick, {})

    def more(self, quick: bool, results: Results) -> list[RunSpec]:
        w = self.walk(results)
        todo = [self._specs(c, a) for c, a in w.next_probes]
        for c in w.starting:
            todo += self._start(c)
        return todo

    def summarize(self, quick: bool, results: Results) -> Summary:
        from dualpath.experiments.plan_outputs import summary

        return summary(self, results)


@dataclass(slots=True)
class Walk:
    ran: list[Candidate] = field(default_factory=list)  # started, in bound order
    next_probes: list[tuple[Candidate, float]] = field(default_factory=list)
    starting: list[Candidate] = field(default_factory=list)
    pruned: dict[str, str] = field(default_factory=dict)  # candidate key -> why
    stopped: dict[str, str] = field(default_factory=dict)  # started, then its bound lost
    unrun: list[Candidate] = field(default_factory=list)  # over the budget
    incumbent: float | None = None  # best measured APS per GPU


def walk(plan: Plan, results: Results) -> Walk:
    spec, w = plan.spec, Walk()
    started = {k.split("-aps")[0].split("-offline")[0] for k in results}
    w.ran = [c for c in plan.order if c.key in started]
    caps = [(capacity(c, results, spec) or 0.0) / c.gpus for c in w.ran]
    w.incumbent = max(caps) if caps and max(caps) > 0 else None
    active = 0
    for c in w.ran:
        bound = plan.bounds[c.key]
        nxt = next_aps(probes_of(c, results), bound.aps, spec)
        nxt = nxt if spec.objective == "online" else None
        broken = [k for k, r in results.items() if k.startswith(f"{c.key}-") and failed(r)]
        why = prunable(bound, c, w.incumbent)
        if nxt is None:
            continue
        if broken:  # a run that raised: no more probes (its error is in the runs table)
            w.stopped[c.key] = f"run {broken[0]} failed"
        elif why is not None:
            w.stopped[c.key] = why
        else:
            w.next_probes.append((c, nxt))
            active += 1
    for c in plan.order:
        if c.key in started:
            continue
        why = prunable(plan.bounds[c.key], c, w.incumbent)
        if why is not None:
            w.pruned[c.key] = why
        elif len(w.ran) + len(w.starting) < spec.budget and active + len(w.starting) < spec.width:
            w.starting.append(c)
        else:
            w.unrun.append(c)
    return w


def measured(plan: Plan, results: Results) -> list[Measured]:
    out = []
    for c in plan.walk(results).ran:
        cap = capacity(c, results, plan.spec)
        off = results.get(offline_key(c, plan.spec.offline_agents or 0))
        best = probe_key(c, cap) if cap is not None else None
        if plan.spec.objective == "offline":
            best = offline_key(c, plan.spec.offline_agents or 0)
        binding = str(pick(results.get(best, {}), "bounds.binding") or "") if best else ""
        out.append(Measured(c, cap, binding, jct(off) if off else None))
    return out
