"""Fitted generator parameters for the paper's three datasets (see fit.py, docs/workload.md)."""

from __future__ import annotations

from types import MappingProxyType

from dualpath.workload.generator import TraceProfile
from dualpath.workload.table2 import K, table2_row

# Fitted with fit.fit_profile(row, n=4000, seed=0); the five fitted fields first.
PROFILES = MappingProxyType(
    {
        32 * K: TraceProfile(356.0, 110.0, 0.79, 6062.0, 136.0, first_cap=8 * K),
        48 * K: TraceProfile(276.0, 123.0, 0.83, 6502.0, 245.0, first_cap=12 * K),
        64 * K: TraceProfile(207.0, 117.0, 0.95, 13384.0, 240.0, first_cap=16 * K),
    }
)


def profile_for(max_len: int) -> TraceProfile:
    """The profile of the Table 2 row `max_len` maps to."""
    return PROFILES[table2_row(max_len).max_len]
