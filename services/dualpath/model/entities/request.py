"""A request (one agent turn) and the per-engine state the scheduler sees."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final


class ReadPath(StrEnum):
    """Where a request's hit KV is read from storage (paper Fig. 4)."""

    PE = "pe"  # storage -> PE node SNIC -> PE DRAM buffer -> PE HBM
    DE = "de"  # storage -> DE node SNIC -> DE DRAM buffer -> DE CNIC -> PE HBM
    # Both at once (policy dualpath-split, virtual time only): `pe_part` tokens the PE way,
    # the rest the DE way, two concurrent flows.
    SPLIT = "split"


def path_value(path: ReadPath) -> str:
    """`path.value`, read where enum's `value` property reads it (`_value_`, the member's
    own attribute): the property is Python code, run twice a turn even in a compiled build."""
    value: str = path._value_
    return value


_FIELDS: Final = (
    "rid", "session", "turn", "prompt", "gen", "arrival", "done", "hit", "pe", "de", "path",
    "computed", "generated", "persisted_blocks", "join_step", "att_join", "hbm_bytes",
    "buffer_bytes", "t_pe", "t_de", "t_read_start", "t_read_done", "t_sched", "t_first",
    "t_second", "t_last", "attempt", "pe_part", "tier_local", "tier_end", "tier_src",
    "forward_s", "load_wait_s", "t_handed", "t_in_hbm", "t_joined",
)  # fmt: skip


class Request:
    """One turn of one agent: prompt = context + append, then `gen` generated tokens.

    A plain slotted class with its `__init__` written out, not a dataclass: a dataclass's
    generated `__init__` runs interpreted even in the compiled build, once per turn.
    Compared by identity, as turns are.
    """

    __slots__ = _FIELDS

    def __init__(
        self,
        rid: int,
        session: int,
        turn: int,
        prompt: int,
        gen: int,
        arrival: float,
        done: asyncio.Future[None] | None = None,
        *,
        hit: int = 0,
        pe: EngineState | None = None,
        de: EngineState | None = None,
        path: ReadPath = ReadPath.PE,
        computed: int = 0,
        persisted_blocks: int = 0,
        hbm_bytes: float = 0.0,
        buffer_bytes: float = 0.0,
        t_pe: float = -1.0,
        t_de: float = -1.0,
        t_read_start: float = -1.0,
        t_read_done: float = -1.0,
        t_first: float = -1.0,
        attempt: int = 0,
    ) -> None:
        self.rid = rid
        self.session = session
        self.turn = turn
        self.prompt = prompt
        self.gen = gen
        self.arrival = arrival
        # Resolved when its last token is out, for a runtime that awaits turns (the process
        # runtime's front door); None where the turn's end is a callback (the virtual core).
        self.done = done
        self.hit = hit  # tokens actually found in the store when the read starts
        self.pe = pe
        self.de = de
        self.path = path
        self.computed = computed  # prompt tokens whose KV exists (hit + computed chunks)
        self.generated = 0
        self.persisted_blocks = persisted_blocks
        self.join_step = 0  # decode unit step count when the request joined its batch
        self.att_join = 0  # attended keys at join (DSA caps them at top-k)
        self.hbm_bytes = hbm_bytes
        self.buffer_bytes = buffer_bytes
        self.t_pe = t_pe
        self.t_de = t_de
        self.t_read_start = t_read_start
        self.t_read_done = t_read_done
        self.t_sched = -1.0  # start of the first prefill forward it was in (vLLM's SCHEDULED)
        self.t_first = t_first
        self.t_second = -1.0
        self.t_last = -1.0
        self.attempt = attempt  # placements so far minus one (a lost node's turns again)
        self.pe_part = 0  # hit tokens read on the PE side of a SPLIT read (whole blocks)
        # DRAM tier (docs/tier.md): hit blocks [0, tier_local) in the reading node's DRAM,
        # [tier_local, tier_end) in node `tier_src`'s DRAM, the rest read from storage
        self.tier_local = 0
        self.tier_end = 0
        self.tier_src = ""
        # TTFT breakdown (report `ttft_breakdown`): time in the prefill forwards this turn
        # was part of, and the share of it those forwards stalled on KV loads into PE HBM
        self.forward_s = 0.0
        self.load_wait_s = 0.0
        # TTST breakdown (report `ttst_breakdown`): the DE was handed the turn (its prompt
        # KV in the DE buffer), the KV reached DE HBM, the turn joined a decode chunk
        self.t_handed = -1.0
        self.t_in_hbm = -1.0
        self.t_joined = -1.0

    def __repr__(self) -> str:
        return f"Request({', '.join(f'{k}={getattr(self, k)!r}' for k in _FIELDS)})"

    def unplace(self) -> None:
        """Forget where this turn was placed (a node of it was lost before its client saw a
        token): it queues again as a new attempt, with nothing read, computed, reserved or
        generated."""
        self.attempt += 1
        self.generated = 0
        self.t_first = self.t_second = self.t_last = -1.0
        self.pe = self.de = None
        self.hit = self.computed = self.persisted_blocks = 0
        self.path = ReadPath.PE
        self.pe_part = 0
        self.tier_local = self.tier_end = 0
        self.tier_src = ""
        self.hbm_bytes = self.buffer_bytes = 0.0
        self.t_pe = self.t_de = self.t_read_start = self.t_read_done = self.t_sched = -1.0
        self.forward_s = self.load_wait_s = 0.0
        self.t_handed = self.t_in_hbm = self.t_joined = -1.0

    @property
    def miss(self) -> int:
        return self.prompt - self.hit

    @property
    def length(self) -> int:
        """Tokens this request holds in decode HBM at its end (len_r in the paper)."""
        return self.prompt + self.gen


class GroupLoad:
    """Σ tok_e over one engine group, kept as its engines' tok_e move (`take_*` and
    `release_*` in policies/base.py): the DE-group choice at every arrival and the PE
    groups' order read one int a group instead of every engine's (768 DEs at 48P96D)."""

    __slots__ = ("size", "tok")

    def __init__(self, size: int) -> None:
        self.size = size  # engines in the group
        self.tok = 0


@dataclass(slots=True, eq=False)
class EngineState:
    """What an engine reports when its group fetches (paper §6.1), plus its identity.

    `seq`/`tok` count unfinished requests assigned to the engine and their tokens;
    `free_hbm` matters for decode engines. `read_q` lives on the node (`NodeState`).
    """

    engine_id: str
    index: int  # global index among engines of its role
    node: NodeState
    group: int
    gpu: int  # GPU index on its node
    seq: int = 0
    tok: int = 0
    free_hbm: float = 0.0
    requests: list[Request] = field(default_factory=list)
    load: GroupLoad | None = None  # its group's Σ tok_e, when built as part of one


@dataclass(slots=True, eq=False)
class NodeState:
    """A node: its storage read queue length in tokens (read_q in the paper)."""

    name: str
    role: str  # "prefill" or "decode"
    index: int
    read_q: int = 0
