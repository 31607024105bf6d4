"""One finished turn as the report reads it: `RequestRecord` (kept by column in `RequestLog`,
metrics.py, and rebuilt on every read of a row).

A plain slotted class with its `__init__` written out, not a dataclass: a dataclass's
generated `__init__` runs interpreted even in a compiled build, and a report builds one
record per turn for each of its passes (six, at 2P4D/1024 about 10 % of a compiled run's
CPU went to building the report). Equality, `repr` and the field order are a dataclass's.
"""

from __future__ import annotations

from typing import Any, Final

# (name, is_float) in positional order: RequestLog's columns and the process runtime's rows
# follow it. The TTFT/TTST stages come last, with defaults, so rows of the first ten load.
RECORD_FIELDS: Final[tuple[tuple[str, bool], ...]] = (
    ("session", False),
    ("turn", False),
    ("prompt", False),
    ("hit", False),
    ("gen", False),
    ("path", False),
    ("arrival", True),
    ("t_first", True),
    ("t_second", True),
    ("t_last", True),
    ("wait_pe_s", True),
    ("wait_de_s", True),
    ("buffer_wait_s", True),
    ("read_s", True),
    ("forward_s", True),
    ("load_wait_s", True),
    ("handover_s", True),
    ("h2d_s", True),
    ("join_wait_s", True),
)
RECORD_NAMES: Final = tuple(name for name, _ in RECORD_FIELDS)


class RequestRecord:  # noqa: PLW1641 - unhashable, as a dataclass that compares by value
    __slots__ = (
        "arrival",
        "buffer_wait_s",
        "forward_s",
        "gen",
        "h2d_s",
        "handover_s",
        "hit",
        "join_wait_s",
        "load_wait_s",
        "path",
        "prompt",
        "read_s",
        "session",
        "t_first",
        "t_last",
        "t_second",
        "turn",
        "wait_de_s",
        "wait_pe_s",
    )

    def __init__(
        self,
        session: int,
        turn: int,
        prompt: int,
        hit: int,
        gen: int,
        path: str,
        arrival: float,
        t_first: float,
        t_second: float,
        t_last: float,
        # TTFT stages (report `ttft_breakdown`, docs/report.md). Durations, not timestamps:
        # a runtime that shifts the clock (the process runtime's t0) leaves them right.
        # -1.0 / 0.0: not measured.
        wait_pe_s: float = -1.0,  # arrival -> a PE assigned
        wait_de_s: float = -1.0,  # PE assigned -> a DE assigned
        buffer_wait_s: float = -1.0,  # DE assigned -> DRAM buffer space held, the read starts
        read_s: float = -1.0,  # storage -> the reading node's DRAM buffer
        forward_s: float = 0.0,  # the prefill forwards the turn was in (0: not measured here)
        load_wait_s: float = 0.0,  # of forward_s: stalled on KV loads into PE HBM
        # TTST stages (report `ttst_breakdown`), the same way; the first decode step is the rest
        handover_s: float = -1.0,  # first token -> the DE handed the turn (KV in its buffer)
        h2d_s: float = -1.0,  # DE buffer -> DE HBM
        join_wait_s: float = -1.0,  # KV in DE HBM -> the decode chunk it joins starts
    ) -> None:
        self.session = session
        self.turn = turn
        self.prompt = prompt
        self.hit = hit
        self.gen = gen
        self.path = path
        self.arrival = arrival
        self.t_first = t_first
        self.t_second = t_second
        self.t_last = t_last
        self.wait_pe_s = wait_pe_s
        self.wait_de_s = wait_de_s
        self.buffer_wait_s = buffer_wait_s
        self.read_s = read_s
        self.forward_s = forward_s
        self.load_wait_s = load_wait_s
        self.handover_s = handover_s
        self.h2d_s = h2d_s
        self.join_wait_s = join_wait_s

    def astuple(self) -> tuple[Any, ...]:
        """The fields in positional order (`RequestRecord(*r.astuple()) == r`)."""
        return tuple([getattr(self, name) for name in RECORD_NAMES])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, RequestRecord)
        return self.astuple() == other.astuple()  # (and unhashable, as a dataclass)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in RECORD_NAMES)
        return f"RequestRecord({fields})"
