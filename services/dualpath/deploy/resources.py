"""Per-pod resource requests and limits, sized from measurements on this project's CI box.

Every pod runs one process of `dualpath up` (or `dualpath sim`, or Locust), so each role
was measured as a process on 2 shared cores (docs/deployment.md has the table):

- the process runtime under the paper's online load, DS 660B 2P4D at 0.4 APS for 240 s at
  dilation 1 (84 sessions, 2,986 turns): `python -m dualpath.deploy.measure load ...`
  (psutil every 0.5 s: peak RSS, peak CPU over 5 s windows; MEASURE_COMMANDS);
- `dualpath sim` with /usr/bin/time -v: smoke (12 agents, 32K) 100 MiB, paper-ds660b-2p4d
  (1,024 agents, 64K) 170 MiB peak RSS, 111 s of CPU on one core.

The rule, the same for every role:

- memory request = 1.25 x (measured peak RSS + growth), rounded up to 32 MiB; growth =
  0.069 MiB per agent beyond the measured ones, x max_len / 64K (the sim's 70 MiB for
  1,012 more agents: the block store and the sessions; applied to storage and scheduler as
  an upper bound, since the sim holds both), and 3.6 MiB per engine beyond 8 per node
  (prefill/decode: 98 MiB at 2 engines, 119 MiB at 8); limit = 2 x request (at least
  256 MiB; Redis 512 MiB: its event stream is capped at 1,000,000 records);
- CPU request = measured peak x the load's scale, rounded up to 50 m, at least 100 m and at
  most one core (one Python process uses one core at most): the scheduler, storage and
  Redis serve every engine, so their load grows with the engines (at the same APS per
  engine); a node process's with its engines; the sim is one busy core. **No CPU limit**:
  CFS throttling would delay a service's timers, and an emulated cluster must not lag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from dualpath.model.config.settings import Scenario
from dualpath.model.workload import parse_max_len

Role = Literal[
    "redis", "storage", "scheduler", "prefill", "decode", "locust-master", "locust-worker", "sim"
]

MEASURE_COMMANDS = (
    "python -m dualpath.deploy.measure load --headless --preset paper-ds660b-2p4d "
    "--aps 0.4 --duration 240 --speedup 1 --http-port 0 --out /tmp/m",
    "/usr/bin/time -v dualpath sim --preset paper-ds660b-2p4d   (and --preset smoke)",
)


@dataclass(frozen=True, slots=True)
class Measured:
    rss_mib: float  # peak resident set size of the process
    cpu_cores: float  # peak CPU over a 5 s window
    agents: int  # sessions of the measured run (memory grows with them)
    engines: int  # engines the process served (its CPU grows with them)


# The process runtime: DS 660B 2P4D (48 engines, 8 per node), 84 sessions at 0.4 APS.
# Locust: the one local Locust process of that run (a master and a worker each do part).
MEASURED: dict[Role, Measured] = {
    "redis": Measured(6.0, 0.009, 84, 48),
    "storage": Measured(119.5, 0.138, 84, 48),
    "scheduler": Measured(120.4, 0.143, 84, 48),
    "prefill": Measured(119.4, 0.141, 84, 8),
    "decode": Measured(119.7, 0.141, 84, 8),
    "locust-master": Measured(114.4, 0.261, 84, 48),
    "locust-worker": Measured(114.4, 0.261, 84, 48),
    # `dualpath sim --preset smoke`: 100 MiB; busy on one core while it runs
    "sim": Measured(100.0, 1.0, 12, 4),
}
PER_AGENT_MIB = 0.069  # at 64K max_len, see above
AGENT_ROLES: frozenset[Role] = frozenset({"storage", "scheduler", "sim"})
PER_ENGINE_MIB = 3.6
NODE_ROLES: frozenset[Role] = frozenset({"prefill", "decode"})
CLUSTER_ROLES: frozenset[Role] = frozenset({"redis", "storage", "scheduler"})
REFERENCE_MAX_LEN = 65_536
MIN_CPU, MAX_CPU = 0.1, 1.0
MIN_LIMIT_MIB = 256
REDIS_LIMIT_MIB = 512


def _round_up(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


def _engines(role: Role, sc: Scenario) -> int:
    top = sc.topology
    if role in NODE_ROLES:
        return top.gpus_per_node
    return (top.prefill_nodes + top.decode_nodes) * top.gpus_per_node


def memory_mib(role: Role, sc: Scenario) -> int:
    m = MEASURED[role]
    growth = 0.0
    if role in AGENT_ROLES:
        scale = parse_max_len(sc.workload.max_len) / REFERENCE_MAX_LEN
        growth = max(0, sc.workload.agents - m.agents) * PER_AGENT_MIB * scale
    if role in NODE_ROLES:
        growth = max(0, sc.topology.gpus_per_node - m.engines) * PER_ENGINE_MIB
    return int(_round_up(1.25 * (m.rss_mib + growth), 32))


def sim_memory_mib(sc: Scenario) -> int:
    return memory_mib("sim", sc)


def cpu_cores(role: Role, sc: Scenario) -> float:
    m = MEASURED[role]
    scale = 1.0
    if role in CLUSTER_ROLES or role in NODE_ROLES:
        scale = max(1.0, _engines(role, sc) / m.engines)
    return min(MAX_CPU, _round_up(max(m.cpu_cores * scale, MIN_CPU), 0.05))


def _cpu(cores: float) -> str:
    milli = round(cores * 1000)
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def pod_resources(role: Role, sc: Scenario) -> dict[str, Any]:
    """The container's `resources` for `role` in scenario `sc`."""
    mem = memory_mib(role, sc)
    limit = REDIS_LIMIT_MIB if role == "redis" else max(2 * mem, MIN_LIMIT_MIB)
    return {
        "requests": {"cpu": _cpu(cpu_cores(role, sc)), "memory": f"{mem}Mi"},
        "limits": {"memory": f"{limit}Mi"},
    }
