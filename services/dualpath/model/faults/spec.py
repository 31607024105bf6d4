"""A fault schedule: what goes wrong, where, from when and for how long. Pure data.

One fault is written `KIND[:TARGET[.LINK=GBPS]]@AT[+FOR]`, times in emulated seconds from
the start of the run (the same on both runtimes; the process runtime divides by its
dilation):

    kill:decode0@10+5          SIGKILL decode0 at t=10 s, start it again at t=15 s
    pause:prefill0@5+2         SIGSTOP prefill0 for 2 s (a hung node; past its heartbeat
                               lease it is declared lost and restarts clean when resumed)
    degrade:prefill0.snic=40@0+300
                               prefill0's storage NIC runs at 40 Gbps (each direction) from
                               t=0 to t=300 s; `.cnic` degrades every GPU NIC of the node
    redis-drop@20+3            Redis stops answering for 3 s (its data stays)

Settings: `faults.schedule: [..]` (YAML list or `--set`), or repeated `--fault` flags.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KINDS = ("kill", "pause", "degrade", "redis-drop")
LINKS = ("snic", "cnic")
_SYNTAX = (
    "KIND[:TARGET[.LINK=GBPS]]@AT[+FOR], e.g. kill:decode0@10+5 or degrade:prefill0.snic=40@0+60"
)
_RE = re.compile(
    r"^(?P<kind>[a-z-]+)"
    r"(?::(?P<target>[A-Za-z0-9_-]+)(?:\.(?P<link>[a-z]+)=(?P<gbps>[^@]+))?)?"
    r"@(?P<at>[^+]+)(?:\+(?P<for>.+))?$"
)


class FaultError(ValueError):
    """A fault that cannot be parsed or applied; the message says which and how to fix it."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    target: str  # a node name, "storage", or "" (redis-drop)
    at_s: float  # emulated seconds from the run's start
    for_s: float  # emulated seconds; 0: for the rest of the run (kill: never restarted)
    link: str = ""  # degrade: "snic" or "cnic"
    gbps: float = 0.0  # degrade: the degraded rate of each direction

    def __str__(self) -> str:
        where = f":{self.target}" if self.target else ""
        if self.kind == "degrade":
            where += f".{self.link}={self.gbps:g}"
        until = f"+{self.for_s:g}" if self.for_s else ""
        return f"{self.kind}{where}@{self.at_s:g}{until}"

    @property
    def end_s(self) -> float:
        return self.at_s + self.for_s if self.for_s else math.inf


def non_negative(text: str, what: str, spec: str) -> float:
    """A time or a rate of a fault: a finite number >= 0, or FaultError naming it."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise FaultError(f"fault {spec!r}: {what} {text!r} must be a finite number >= 0")
    return value


def parse(spec: str) -> Fault:
    m = _RE.match(spec.strip())
    if m is None:
        raise FaultError(f"fault {spec!r}: expected {_SYNTAX}")
    kind, target, link = m["kind"], m["target"] or "", m["link"] or ""
    if kind not in KINDS:
        raise FaultError(f"fault {spec!r}: unknown kind {kind!r}; one of {', '.join(KINDS)}")
    at = non_negative(m["at"], "AT", spec)
    dur = non_negative(m["for"], "FOR", spec) if m["for"] is not None else 0.0
    if kind == "redis-drop":
        if target:
            raise FaultError(f"fault {spec!r}: redis-drop takes no target (redis-drop@AT+FOR)")
        if not dur:
            raise FaultError(f"fault {spec!r}: redis-drop needs a duration (+FOR > 0)")
    elif not target:
        raise FaultError(f"fault {spec!r}: {kind} needs a target node, e.g. {kind}:decode0@AT")
    if kind == "degrade":
        if link not in LINKS:
            raise FaultError(f"fault {spec!r}: degrade needs TARGET.LINK=GBPS (LINK: snic, cnic)")
        gbps = non_negative(m["gbps"], "GBPS", spec)
        if gbps <= 0:
            raise FaultError(f"fault {spec!r}: GBPS must be > 0 (kill the node for 0)")
        return Fault(kind, target, at, dur, link, gbps)
    if link:
        raise FaultError(f"fault {spec!r}: only degrade takes .LINK=GBPS")
    if kind == "pause" and not dur:
        raise FaultError(f"fault {spec!r}: pause needs a duration (+FOR > 0)")
    return Fault(kind, target, at, dur)


def parse_all(specs: Iterable[str]) -> list[Fault]:
    return sorted((parse(s) for s in specs), key=lambda f: f.at_s)


def check_targets(faults: Sequence[Fault], nodes: Iterable[str]) -> None:
    """Every target must exist in the scenario (`storage` is a valid kill/pause target)."""
    names = set(nodes)
    for f in faults:
        if f.kind == "degrade" and f.target not in names:
            raise FaultError(f"fault {f}: no node {f.target!r}; nodes: {', '.join(sorted(names))}")
        if f.kind in ("kill", "pause") and f.target not in names | {"storage"}:
            raise FaultError(
                f"fault {f}: no service {f.target!r}; one of storage, {', '.join(sorted(names))}"
            )


def virtual_faults_only(specs: Iterable[str]) -> None:
    """On virtual time a node is not a process: only link faults apply there."""
    for f in parse_all(specs):
        if f.kind != "degrade":
            raise FaultError(
                f"fault {f}: {f.kind} needs the process runtime (dualpath up / run, where a "
                "service is a process to signal); on virtual time use degrade:NODE.LINK=GBPS"
            )
