"""Faults on purpose: one schedule format, applied on both runtimes (docs/faults.md)."""

from dualpath.faults.spec import KINDS, Fault, FaultError, check_targets, parse, parse_all

__all__ = ["KINDS", "Fault", "FaultError", "check_targets", "parse", "parse_all"]
