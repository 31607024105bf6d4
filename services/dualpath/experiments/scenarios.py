"""Scenario and run-key builders shared by the experiments.

Full mode uses the paper presets; quick mode uses tiny scenarios in the spirit of the
`smoke` preset (DS 27B, 2 GPUs per node, a handful of agents at 32K MaxLen, about a second
each) that exercise the same code paths but are NOT comparable to the paper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario

DS660B = "paper-ds660b-2p4d"
DS27B = "paper-ds27b-1p1d"
QWEN32B = "paper-qwen32b-1p2d"
QUICK_PRESET = "smoke"
QUICK_GPUS_PER_NODE = 2
QUICK_MAX_LEN = "32k"
QUICK_NOTE = "quick: reduced scenario, not comparable"
QUICK_SETUP = (
    "quick mode: DS 27B, 2 GPUs per node, 32K MaxLen, a handful of agents per run "
    "(reduced scenarios, NOT comparable to the paper)"
)


@dataclass(frozen=True, slots=True)
class Arm:
    """A model/topology configuration of the paper and its quick stand-in."""

    slug: str  # used in run keys, e.g. "ds660b"
    label: str  # for people, e.g. "DS 660B"
    preset: str
    prefill: int
    decode: int
    quick_prefill: int
    quick_decode: int

    def name(self, quick: bool) -> str:
        return f"{self.label} (quick stand-in)" if quick else self.label

    def topo(self, quick: bool) -> str:
        return (
            topo(self.quick_prefill, self.quick_decode)
            if quick
            else topo(self.prefill, self.decode)
        )


# DS 660B runs 2P4D in the paper; its quick stand-in keeps the 1:2 P/D ratio.
ARM_660B = Arm("ds660b", "DS 660B", DS660B, 2, 4, 1, 2)
ARM_27B = Arm("ds27b", "DS 27B", DS27B, 1, 1, 1, 1)
ARM_QWEN = Arm("qwen32b", "Qwen 32B", QWEN32B, 1, 2, 1, 2)


def topo(prefill: int, decode: int) -> str:
    return f"{prefill}P{decode}D"


def run_key(*parts: object, quick: bool = False) -> str:
    """Filesystem-safe key from parts, e.g. ds660b-2p4d-64k-a1024-dualpath. Quick runs get a
    `quick-` prefix so that they never shadow a full run's cached report."""
    raw = "-".join(str(p) for p in parts if str(p)).lower()
    key = re.sub(r"[^a-z0-9._-]+", "_", raw)
    return f"quick-{key}" if quick else key


def dram_tag(bytes_per_node: float) -> str:
    """A DRAM tier size as a run-key part, in decimal GB: 1.5e12 -> "dram1500gb"."""
    return f"dram{bytes_per_node / 1e9:g}gb"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build(
    arm: Arm,
    quick: bool,
    *,
    policy: str,
    agents: int,
    max_len: str,
    prefill: int | None = None,
    decode: int | None = None,
    extra: dict[str, Any] | None = None,
) -> Scenario:
    """The arm's scenario (paper preset, or the quick stand-in) with these overrides.
    `prefill`/`decode` override the arm's node counts; `max_len` is ignored in quick mode."""
    topology: dict[str, Any] = {
        "prefill_nodes": prefill or (arm.quick_prefill if quick else arm.prefill),
        "decode_nodes": decode or (arm.quick_decode if quick else arm.decode),
    }
    overrides: dict[str, Any] = {
        "policy": {"name": policy},
        "workload": {"agents": agents, "max_len": QUICK_MAX_LEN if quick else max_len},
        "topology": topology,
    }
    if quick:
        topology["gpus_per_node"] = QUICK_GPUS_PER_NODE
        overrides["model"] = "ds-27b"
    return resolve(QUICK_PRESET if quick else arm.preset, _merge(overrides, extra or {}), [])


def labels(sc: Scenario, **more: str | int | float) -> dict[str, str | int | float]:
    """The standard labels of a run (model, topology, max_len, agents, policy) plus `more`."""
    t = sc.topology
    out: dict[str, str | int | float] = {
        "model": sc.model,
        "topology": topo(t.prefill_nodes, t.decode_nodes),
        "gpus_per_node": t.gpus_per_node,
        "max_len": sc.workload.max_len,
        "agents": sc.workload.agents,
        "policy": sc.policy.name,
    }
    out.update(more)
    return out


def max_len(quick: bool, full: str) -> str:
    """The MaxLen a run really uses: quick runs are always 32K."""
    return QUICK_MAX_LEN if quick else full
