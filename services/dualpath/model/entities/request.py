"""A request (one agent turn) and the per-engine state the scheduler sees."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum


class ReadPath(StrEnum):
    """Where a request's hit KV is read from storage (paper Fig. 4)."""

    PE = "pe"  # storage -> PE node SNIC -> PE DRAM buffer -> PE HBM
    DE = "de"  # storage -> DE node SNIC -> DE DRAM buffer -> DE CNIC -> PE HBM
    # Both at once (policy dualpath-split, virtual time only): `pe_part` tokens the PE way,
    # the rest the DE way, two concurrent flows.
    SPLIT = "split"


@dataclass(slots=True, eq=False)
class Request:
    """One turn of one agent: prompt = context + append, then `gen` generated tokens."""

    rid: int
    session: int
    turn: int
    prompt: int
    gen: int
    arrival: float
    # Resolved when its last token is out, for a runtime that awaits turns (the process
    # runtime's front door); None where the turn's end is a callback (the virtual core).
    done: asyncio.Future[None] | None = None
    hit: int = 0  # tokens actually found in the store when the read starts
    pe: EngineState | None = None
    de: EngineState | None = None
    path: ReadPath = ReadPath.PE
    computed: int = 0  # prompt tokens whose KV exists (hit + computed chunks)
    generated: int = 0
    persisted_blocks: int = 0
    join_step: int = 0  # decode unit step count when the request joined its batch
    att_join: int = 0  # attended keys at join (DSA caps them at top-k)
    hbm_bytes: float = 0.0
    buffer_bytes: float = 0.0
    t_pe: float = -1.0
    t_de: float = -1.0
    t_read_start: float = -1.0
    t_read_done: float = -1.0
    t_sched: float = -1.0  # start of the first prefill forward it was in (vLLM's SCHEDULED)
    t_first: float = -1.0
    t_second: float = -1.0
    t_last: float = -1.0
    attempt: int = 0  # placements so far minus one (a lost node's turns are placed again)
    pe_part: int = 0  # hit tokens read on the PE side of a SPLIT read (whole blocks)
    # DRAM tier (docs/tier.md): hit blocks [0, tier_local) in the reading node's DRAM,
    # [tier_local, tier_end) in node `tier_src`'s DRAM, the rest read from storage
    tier_local: int = 0
    tier_end: int = 0
    tier_src: str = ""
    # TTFT breakdown (report `ttft_breakdown`): time in the prefill forwards this turn was
    # part of, and the share of it those forwards stalled on KV loads into PE HBM
    forward_s: float = 0.0
    load_wait_s: float = 0.0
    # TTST breakdown (report `ttst_breakdown`): the DE was handed the turn (its prompt KV in
    # the DE buffer), the KV reached DE HBM, the turn joined a decode chunk
    t_handed: float = -1.0
    t_in_hbm: float = -1.0
    t_joined: float = -1.0

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


@dataclass(slots=True, eq=False)
class NodeState:
    """A node: its storage read queue length in tokens (read_q in the paper)."""

    name: str
    role: str  # "prefill" or "decode"
    index: int
    read_q: int = 0
