"""The contract between the HTTP front door and whatever executes emulated turns.

The front door never generates text: it turns each request into a `TurnSpec`, hands it to
a `TurnBackend` and reports the emulated timings of the `TurnResult` it gets back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dualpath.blocks.chain import Fork


@dataclass(frozen=True, slots=True)
class TurnSpec:
    session: int  # internal session id (the KV chain the prompt extends)
    turn: int  # turn index within the session, from 0
    prompt_tokens: int  # whole prompt (context + append), >= 1
    gen_tokens: int  # tokens to generate, >= 1
    lineage: tuple[Fork, ...] = ()  # the chain's forks (shared prefixes), root first


@dataclass(frozen=True, slots=True)
class TurnResult:
    request_id: int
    session: int
    turn: int
    prompt_tokens: int
    cached_tokens: int  # prompt tokens whose KV was read from storage (hit)
    generated_tokens: int
    read_path: str  # "pe" or "de"
    arrival_s: float  # emulated seconds
    first_token_s: float
    second_token_s: float
    last_token_s: float


class BackendBusy(Exception):  # noqa: N818 -- names fixed by the backend contract
    """The backend's bounded queue is full; the client should retry shortly (HTTP 429)."""


class BackendUnavailable(Exception):  # noqa: N818
    """The cluster cannot serve at all right now (HTTP 503)."""


class BadTurn(Exception):  # noqa: N818
    """The backend rejects this turn; the message is shown to the client (HTTP 400).

    `param` optionally names the request field at fault.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class TurnBackend(Protocol):
    async def run_turn(
        self, spec: TurnSpec, first_token: Callable[[], None] | None = None
    ) -> TurnResult:
        """Run one turn to completion.

        `first_token` is called once the first token exists, so a stream can emit it before
        the rest; every other token is known when this returns. Raises `BackendBusy`,
        `BackendUnavailable` or `BadTurn`.
        """
        ...
