"""Faults on purpose: one schedule format, applied on both runtimes (docs/faults.md).

Pure data, low in the layers so the settings can parse a schedule: what applies a degrade
to the model's links is `model/engines/faults.py`, signals on processes
`runtimes/process/launcher/faults.py`.
"""

from dualpath.model.faults.spec import KINDS, Fault, FaultError, check_targets, parse, parse_all

__all__ = ["KINDS", "Fault", "FaultError", "check_targets", "parse", "parse_all"]
