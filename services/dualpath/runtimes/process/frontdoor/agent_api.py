"""The native agent endpoint: POST /v1/agent/turn.

Two forms. Append form (`append_tokens`): an agent's next turn extends its whole history
(previous prompt + previous output + the new append), as in the paper's trajectories, so
the client only sends the append size; the history is private to the session. Block-id
form (`prompt_tokens` + `block_ids` + `block_tokens`, a trace's `hash_ids`): the prompt's
content is named by the client's ids, content-addressed through the same prefix index as
the OpenAI endpoints, so equal leading ids hit the same KV across sessions.

Native session keys get internal ids from their own counter starting at 1_000_000_000,
apart from the OpenAI prefix table (which counts from 1), so the two never share a KV
chain by accident. At most `max_sessions` keys are kept; the least recently used is
forgotten and would restart at turn 0 on a fresh chain.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from aiohttp import web

from dualpath.runtimes.process.frontdoor import params
from dualpath.runtimes.process.frontdoor.backend import Hangups, TurnResult, TurnSpec
from dualpath.runtimes.process.frontdoor.errors import ApiError, bad_param
from dualpath.runtimes.process.frontdoor.metrics import timings
from dualpath.runtimes.process.frontdoor.sessions import PrefixSessions, id_block_hashes
from dualpath.runtimes.process.frontdoor.turns import Limits, TurnRunner

NATIVE_SESSION_BASE = 1_000_000_000


@dataclass(slots=True)
class NativeSession:
    session: int
    next_turn: int = 0
    context_tokens: int = 0  # previous prompt + previous generated
    busy: bool = False


class NativeSessions:
    def __init__(self, max_sessions: int = 100_000) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self._by_key: OrderedDict[str, NativeSession] = OrderedDict()  # LRU, oldest first
        self._next_id = NATIVE_SESSION_BASE

    def get(self, key: str) -> NativeSession:
        state = self._by_key.get(key)
        if state is None:
            state = self._by_key[key] = NativeSession(self._next_id)
            self._next_id += 1
        self._by_key.move_to_end(key)
        while len(self._by_key) > self.max_sessions:
            self._by_key.popitem(last=False)
        return state


class TurnArgs(NamedTuple):
    key: str
    append: int
    gen: int
    hashes: tuple[int, list[bytes]] | None  # block-id form: (prompt tokens, block hashes)
    wanted: int | None  # the turn index the client expects


class AgentApi:
    def __init__(
        self,
        limits: Limits,
        sessions: NativeSessions,
        runner: TurnRunner,
        prefixes: PrefixSessions,
        reader: params.BodyReader,
        hangups: Hangups,
    ) -> None:
        self._limits = limits
        self._sessions = sessions
        self._runner = runner
        self._prefixes = prefixes
        self._reader = reader
        self._hangups = hangups

    async def turn(self, request: web.Request) -> web.Response:
        _, (key, append, gen, hashes, wanted) = await self._reader.read(request, self._args)
        self._runner.check_capacity()
        state = self._sessions.get(key)
        if state.busy:  # turns of one agent are sequential: the next needs the last's output
            raise ApiError(409, f"Session '{key}' has a turn running; wait for it", param="session")
        if wanted is not None and wanted != state.next_turn:
            raise ApiError(
                409,
                f"'turn' is {wanted} but session '{key}' expects turn {state.next_turn}",
                param="turn",
                code="turn_mismatch",
            )
        if hashes is not None:
            place = self._prefixes.place(hashes[1])
            spec = TurnSpec(place.session, place.turn, hashes[0], gen, place.lineage)
        else:
            prompt = state.context_tokens + append
            if prompt > self._limits.max_prompt_tokens:
                raise bad_param(
                    "append_tokens",
                    f"the prompt would reach {prompt} tokens, over the limit of "
                    f"{self._limits.max_prompt_tokens}; start a new session",
                )
            spec = TurnSpec(state.session, state.next_turn, prompt, gen)
        result = await self._run(state, spec, lambda: request.transport is None)
        return web.json_response({"session_key": key, **_result_body(result)})

    def _args(self, body: params.Body) -> TurnArgs:
        """The validated fields (pure: runs in the body reader's thread for big bodies)."""
        key = _session_key(body)
        by_ids = "block_ids" in body or "prompt_tokens" in body
        if by_ids and "append_tokens" in body:
            raise bad_param(
                "append_tokens",
                "send either 'append_tokens' or 'prompt_tokens' with 'block_ids', not both",
            )
        append = 0 if by_ids else params.opt_int(body, "append_tokens", None, 1)
        gen = params.opt_int(body, "gen_tokens", None, 1, self._limits.max_gen_tokens)
        hashes = self._id_hashes(body) if by_ids else None
        wanted = None if body.get("turn") is None else params.opt_int(body, "turn", None, 0)
        return TurnArgs(key, append, gen, hashes, wanted)

    def _id_hashes(self, body: params.Body) -> tuple[int, list[bytes]]:
        """(prompt tokens, the cluster's block hashes) of a block-id turn."""
        cluster_bt = self._limits.block_tokens
        prompt = params.opt_int(body, "prompt_tokens", None, 1, self._limits.max_prompt_tokens)
        bt = params.opt_int(body, "block_tokens", cluster_bt, 1)
        if bt % cluster_bt:
            raise bad_param(
                "block_tokens",
                f"'block_tokens' must be a multiple of the cluster's block "
                f"size {cluster_bt}, got {bt}",
            )
        ids = body.get("block_ids")
        most = -(-prompt // bt)  # a trace may name the partial last block too
        if not isinstance(ids, list) or len(ids) > most:
            raise bad_param(
                "block_ids",
                f"'block_ids' must be a list of at most {most} integers "
                f"(ceil(prompt_tokens / block_tokens)), one per block of the prompt",
            )
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not -(2**63) <= i < 2**63:
                raise bad_param("block_ids", "'block_ids' items must be 64-bit integers")
        full = prompt // cluster_bt  # only full blocks of the cluster can be stored and hit
        # Hash no part past the prompt's full blocks (the chain makes the first `full` hashes
        # the same): one id with a huge 'block_tokens' once meant ~10^17 hashes, a hang.
        per_id = min(bt // cluster_bt, full)
        if per_id == 0:
            return prompt, []
        return prompt, id_block_hashes(ids[: -(-full // per_id)], per_id)[:full]

    async def _run(
        self, state: NativeSession, spec: TurnSpec, client_gone: Callable[[], bool]
    ) -> TurnResult:
        task = self._runner.start(spec)
        state.busy = True
        # Settled by the task, not the handler: the session follows what the turn really did.
        task.add_done_callback(lambda t: _settle(state, t))
        return await self._hangups.follow(spec, task, client_gone)


def _settle(state: NativeSession, task: asyncio.Task[TurnResult]) -> None:
    state.busy = False
    if task.cancelled() or task.exception() is not None:
        return  # not advanced: a refused turn can be retried with the same index
    result = task.result()
    state.next_turn += 1
    state.context_tokens = result.prompt_tokens + result.generated_tokens


def _session_key(body: params.Body) -> str:
    key = body.get("session")
    if not isinstance(key, str) or not 1 <= len(key) <= 128:
        raise bad_param("session", "'session' is required: a string of 1 to 128 characters")
    return key


def _result_body(result: TurnResult) -> dict[str, object]:
    return {**dataclasses.asdict(result), **timings(result)}
