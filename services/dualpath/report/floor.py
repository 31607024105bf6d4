"""JCT floor of an offline run: the longest single agent's run time on an idle cluster.

An agent's turns run one after another, so no cluster finishes the job before its slowest
agent could finish alone. Per turn the floor counts only what cannot overlap within the
turn, from the same roofline the engines use:

- prefill: the whole miss in ONE forward on one PE GPU (`Roofline.prefill_time`; chunking
  only adds per-chunk overhead), or its expert all-to-all on an idle CNIC if longer;
- decode: gen - 1 single-request steps on one DE GPU (the first token comes from the PE),
  step k at context prompt + k (`Roofline.decode_step_time`, or its all-to-all if longer);
- plus, in session replay, the script's think times before turns and its start time (in
  open-loop replay each turn runs from its own arrival instead).

The hit is what the session's own earlier turns persisted (the engines' rule: every full
block of prompt + gen - 1), so the floor is a lower bound when sessions share no KV
(synthetic sources, WEKA session replay); a trace whose sessions share prefixes can hit more.
Left out, so the floor is below any real run: scheduling intervals, storage reads, the KV
loads into PE HBM, the PE -> DE hand-over and the DE's H2D copy.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dualpath.model.entities.metrics import RequestRecord
from dualpath.model.roofline import Roofline
from dualpath.model.workload.script import AgentScript, ScriptTurn, Workload
from dualpath.report.timeline import float_column, int_column

FLOOR_TOLERANCE = 0.05  # JCT within 5 % of the floor: one agent's critical path sets the JCT
_SLOPE_PROBE = 1 << 20  # context used to read the decode step's slopes (any size works)


@dataclass(frozen=True, slots=True)
class AgentFloor:
    key: str
    turns: int
    prefill_s: float
    decode_s: float
    think_s: float  # think times + start (session replay); 0 in open-loop replay
    total_s: float


class FloorModel:
    """Idle-cluster minimum of one turn: prefill on a lone PE GPU + decode on a lone DE GPU."""

    def __init__(
        self,
        prefill: Roofline,
        decode: Roofline,
        block_tokens: int,
        cnic_bytes_s: float,
        gpus_per_node: int,
    ) -> None:
        self.pe, self.de, self.bt = prefill, decode, block_tokens
        self.gpus_per_node = gpus_per_node
        self.cnic = cnic_bytes_s
        # A batch-of-one decode step is affine in its context and attended keys: every max()
        # in decode_step_time compares two lines through the origin at a fixed batch size.
        t0 = decode.decode_step_time(1, 0, 0)
        self._d0 = t0
        self._d_ctx = (decode.decode_step_time(1, _SLOPE_PROBE, 0) - t0) / _SLOPE_PROBE
        self._d_att = (decode.decode_step_time(1, 0, _SLOPE_PROBE) - t0) / _SLOPE_PROBE
        self._topk = decode.attended(1 << 40)  # huge when the model attends everything
        self._d_a2a = self._a2a_s(decode, 1)

    def _a2a_s(self, rl: Roofline, tokens: int) -> float:
        """Expert all-to-all of `tokens` over all layers on an idle CNIC (DeepEP: only the
        RDMA share crosses it; engines.context.EngineContext.a2a_bytes)."""
        per_layer = rl.a2a_rdma_bytes_per_layer(tokens, self.gpus_per_node)
        return per_layer * rl.moe_layers / self.cnic if self.cnic > 0 else 0.0

    def hit(self, turn: ScriptTurn) -> int:
        """Tokens the session's own earlier turns left in the store for this turn."""
        context = turn.prompt - min(turn.append, turn.prompt)
        stored = (context - 1) // self.bt if context > 0 else 0
        return self.bt * min(stored, (turn.prompt - 1) // self.bt)

    def prefill_s(self, turn: ScriptTurn) -> float:
        hit = self.hit(turn)
        new = turn.prompt - hit
        return max(self.pe.prefill_time([(hit, new)]), self._a2a_s(self.pe, new))

    def decode_s(self, turn: ScriptTurn) -> float:
        """Σ of gen - 1 single-request steps, step k at context prompt + k (closed form)."""
        n = turn.gen - 1
        if n <= 0:
            return 0.0
        p = turn.prompt
        if self._step(p + n - 1) <= self._d_a2a:  # every step waits for its all-to-all
            return n * self._d_a2a
        if self._step(p) >= self._d_a2a:
            return self._steps(p, 0, n)
        lo, hi = 0, n - 1  # first step whose compute outlasts the all-to-all
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if self._step(p + mid) < self._d_a2a else (lo, mid)
        return lo * self._d_a2a + self._steps(p, lo, n)

    def _step(self, ctx: int) -> float:
        return self._d0 + self._d_ctx * ctx + self._d_att * min(ctx, self._topk)

    def _steps(self, p: int, lo: int, hi: int) -> float:
        """Σ_{k=lo}^{hi-1} of the step at context p + k."""
        n = hi - lo
        first = p + lo
        sum_ctx = n * first + n * (n - 1) // 2
        m = min(max(self._topk - first, 0), n)  # steps still below top-k
        sum_att = m * first + m * (m - 1) // 2 + (n - m) * self._topk
        return n * self._d0 + self._d_ctx * sum_ctx + self._d_att * sum_att

    def agent(self, script: AgentScript, open_loop: bool) -> AgentFloor:
        pre = [self.prefill_s(t) for t in script.turns]
        dec = [self.decode_s(t) for t in script.turns]
        if open_loop:  # each turn from its own arrival: the latest finish bounds the agent
            ends = [t.at_s + a + b for t, a, b in zip(script.turns, pre, dec, strict=True)]
            last = int(np.argmax(ends))
            return AgentFloor(script.key, len(pre), pre[last], dec[last], 0.0, ends[last])
        think = script.start_s + sum(t.think_s for t in script.turns[1:])
        return AgentFloor(script.key, len(pre), sum(pre), sum(dec), think,
                          think + sum(pre) + sum(dec))  # fmt: skip


def floor_section(
    model: FloorModel,
    workload: Workload,
    records: Collection[RequestRecord],
    jct: float,
    open_loop: bool,
) -> dict[str, Any]:
    """Top-level `jct_floor_s`, `jct_floor_bound` and the `jct_floor` details."""
    agents = [model.agent(s, open_loop) for s in workload.scripts]
    if not agents:
        return {}
    worst = max(agents, key=lambda a: a.total_s)
    floor = worst.total_s
    per = np.asarray([a.total_s for a in agents])
    return {
        "jct_floor_s": floor,
        "jct_floor_bound": bool(floor > 0 and jct <= floor * (1 + FLOOR_TOLERANCE)),
        "jct_floor": {
            "agent": worst.key,
            "turns": worst.turns,
            "prefill_s": worst.prefill_s,
            "decode_s": worst.decode_s,
            "think_s": worst.think_s,
            "jct_over_floor": jct / floor if floor > 0 else None,
            "tolerance": FLOOR_TOLERANCE,
            "replay": "open-loop" if open_loop else "session",
            "per_agent_s": _spread(per),
            "agents_over_half_jct": int((per > 0.5 * jct).sum()),
            "last_agent": None if open_loop else _last_agent(workload, records, agents),
        },
    }


def _last_agent(
    workload: Workload, records: Collection[RequestRecord], floors: Sequence[AgentFloor]
) -> dict[str, Any] | None:
    """The agent whose last token ended the run, and where its time went: summed TTFTs,
    summed decode (first -> last token), the rest (think times, hand-overs between turns),
    and its decode over its idle-cluster decode floor (the batch's slowdown of each step)."""
    owner = _Owners(workload)
    # By column: only the rows at the latest last token, then the chosen agent's own rows,
    # are matched to their scripts (a script lookup per row was 1 % of a compiled run).
    session, turn, arrival, t_first, t_last = _columns(records)
    script = _ended_last(owner, session, turn, t_last)
    if script is None:
        return None
    rows = [
        (float(arrival[i]), float(t_first[i]), float(t_last[i]))
        for i in _on_chains(script, session)
        if owner.of(int(session[i]), int(turn[i])) is script
    ]
    ran = max(last for *_, last in rows) - script.start_s
    ttft = sum(first - arrived for arrived, first, _ in rows)  # in row order, as before
    decode = sum(last - first for _, first, last in rows)
    floor = next(f for f in floors if f.key == script.key)
    return {
        "agent": script.key,
        "turns": len(rows),
        "run_s": ran,
        "ttft_s": ttft,
        "decode_s": decode,
        "other_s": ran - ttft - decode,
        "floor_s": floor.total_s,
        "decode_over_floor": decode / floor.decode_s if floor.decode_s > 0 else None,
    }


def _ended_last(
    owner: _Owners, session: np.ndarray, turn: np.ndarray, t_last: np.ndarray
) -> AgentScript | None:
    """The script with the latest last token among rows that have a script; on a tie, the
    one whose first such row comes first (what a dict of each script's latest token, filled
    in row order, and max() over it pick)."""
    alive = np.ones(len(t_last), dtype=bool)
    while alive.any():
        top = np.flatnonzero(alive & (t_last == t_last[alive].max())).tolist()
        scripts: list[AgentScript] = []
        for i in top:
            s = owner.of(int(session[i]), int(turn[i]))
            if s is not None and all(s is not x for x in scripts):
                scripts.append(s)
        if len(scripts) == 1:
            return scripts[0]
        if scripts:
            return min(scripts, key=lambda s: _first_row(owner, s, session, turn))
        alive[top] = False  # rows no script has: the next latest token
    return None


def _on_chains(script: AgentScript, session: np.ndarray) -> list[int]:
    """The rows on any of the script's chains, in order (the script's own are among them)."""
    chains = np.asarray(sorted({t.chain for t in script.turns}), dtype=np.int64)
    rows: list[int] = np.flatnonzero(np.isin(session, chains)).tolist()
    return rows


def _first_row(owner: _Owners, script: AgentScript, session: np.ndarray, turn: np.ndarray) -> int:
    for i in _on_chains(script, session):
        if owner.of(int(session[i]), int(turn[i])) is script:
            return int(i)
    return len(session)


class _Owners:
    """The script a record's turn belongs to: the one whose turn `r.turn` is on chain
    `r.session` (the last such script, as a dict over every (chain, turn) would keep). A
    chain of a few scripts is searched; a chain many scripts share (a trace's common
    prefix) gets a turn index. Either way no key per turn for the usual one-script chain."""

    def __init__(self, workload: Workload) -> None:
        by_chain: dict[int, list[AgentScript]] = {}
        for s in reversed(workload.scripts):  # the last script first
            for chain in dict.fromkeys(t.chain for t in s.turns):
                by_chain.setdefault(chain, []).append(s)
        self._few = {c: got for c, got in by_chain.items() if len(got) <= _FEW}
        self._many: dict[int, dict[int, AgentScript]] = {}
        for c, got in by_chain.items():
            if len(got) > _FEW:
                index = self._many[c] = {}
                for s in reversed(got):  # in workload order: a later script overwrites
                    for i, t in enumerate(s.turns):
                        if t.chain == c:
                            index[i] = s

    def of(self, session: int, turn: int) -> AgentScript | None:
        """The script of a record's turn (`r.session`, `r.turn`), if one has it."""
        many = self._many.get(session)
        if many is not None:
            return many.get(turn)
        for s in self._few.get(session, ()):
            if 0 <= turn < len(s.turns) and s.turns[turn].chain == session:
                return s
        return None


def _columns(
    records: Collection[RequestRecord],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """session, turn, arrival, t_first and t_last of every row (report/timeline.py reads a
    `RequestLog`'s columns without a record a row, or any other records')."""
    session, turn = int_column(records, "session"), int_column(records, "turn")
    arrival, t_first = float_column(records, "arrival"), float_column(records, "t_first")
    return session, turn, arrival, t_first, float_column(records, "t_last")


_FEW = 4  # scripts on one chain searched in turn; more get an index


def _spread(a: Sequence[float] | np.ndarray) -> dict[str, float]:
    x = np.asarray(a, dtype=float)
    return {
        "mean": float(x.mean()),
        "p50": float(np.percentile(x, 50)),
        "p99": float(np.percentile(x, 99)),
        "max": float(x.max()),
    }
