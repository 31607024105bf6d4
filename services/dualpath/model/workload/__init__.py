"""Agentic workloads: trajectories matching the paper's Table 2, extra agents, arrivals.

Pure (no I/O, no asyncio): shared by the emulator and the Locust load generator.
See docs/workload.md for the model, the statistics' definitions and achieved-vs-paper numbers.
"""

from dualpath.model.workload.arrivals import offline_arrivals, online_arrivals
from dualpath.model.workload.generator import TraceProfile
from dualpath.model.workload.profiles import PROFILES, profile_for
from dualpath.model.workload.stats import trajectory_stats
from dualpath.model.workload.synthetic import BASE_TRAJECTORIES, synthetic_trajectories
from dualpath.model.workload.table2 import TABLE2, Table2Row, parse_max_len, table2_row
from dualpath.model.workload.trajectory import Trajectory, Turn

__all__ = [
    "BASE_TRAJECTORIES",
    "PROFILES",
    "TABLE2",
    "Table2Row",
    "TraceProfile",
    "Trajectory",
    "Turn",
    "offline_arrivals",
    "online_arrivals",
    "parse_max_len",
    "profile_for",
    "synthetic_trajectories",
    "table2_row",
    "trajectory_stats",
]
