"""The contract between the HTTP front door and whatever executes emulated turns.

The front door never generates text: it turns each request into a `TurnSpec`, hands it to
a `TurnBackend` and reports the emulated timings of the `TurnResult` it gets back.

Cancellation is optional. Turns run detached from their HTTP handler, so a backend that
cannot cancel (no `cancel_turn`) is never asked to: a turn whose client hung up runs to
completion and its KV accounting stays exact. A backend that can stop a turn implements
`CancellableBackend.cancel_turn`; the front door then calls it once per turn whose HTTP
client disconnected before the turn finished (see `Hangups`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from dualpath.model.blocks.chain import Fork

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnSpec:
    session: int  # internal session id (the KV chain the prompt extends)
    turn: int  # turn index within the session, from 0
    prompt_tokens: int  # whole prompt (context + append), >= 1
    gen_tokens: int  # tokens to generate, >= 1
    lineage: tuple[Fork, ...] = ()  # the chain's forks (shared prefixes), root first
    # time.perf_counter() when the HTTP request arrived, before its body was read and
    # tokenized: the turn's arrival, as a client's clock starts (None: when it is admitted)
    received: float | None = None


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
    # start of the first prefill forward the turn was in (vLLM's SCHEDULED event); None: the
    # backend does not know, and the turn counts as scheduled on arrival
    scheduled_s: float | None = None
    engine: str = "0"  # the engine that finished it (`engine` label; vLLM's single core: "0")


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


TokensFn = Callable[[int, float], None]


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


class StreamingBackend(TurnBackend, Protocol):
    """A backend that also reports the tokens after the first as they are generated.

    Optional, like cancellation: the front door passes `on_tokens` (by keyword) only to a
    backend whose `run_turn` accepts it, and only for streamed turns."""

    async def run_turn(
        self,
        spec: TurnSpec,
        first_token: Callable[[], None] | None = None,
        on_tokens: TokensFn | None = None,
    ) -> TurnResult:
        """As `TurnBackend.run_turn`; also calls `on_tokens(n, t)` when the turn's first `n`
        tokens exist, the n-th generated at emulated time t (n grows from call to call;
        call it when that time comes, not before, so the stream shows the decode cadence).
        Tokens not yet reported when this returns are sent with the end of the stream.
        """
        ...


def accepts_tokens(backend: TurnBackend) -> bool:
    """Whether `backend.run_turn` takes `on_tokens` (a `StreamingBackend`)."""
    try:
        params = inspect.signature(backend.run_turn).parameters
    except (TypeError, ValueError):
        return False
    return "on_tokens" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


class CancellableBackend(TurnBackend, Protocol):
    async def cancel_turn(self, spec: TurnSpec) -> None:
        """The client of the turn `spec` (the very object given to `run_turn`, still running)
        hung up: stop the turn and free what it holds (queue slot, KV blocks, link
        reservations). `(spec.session, spec.turn)` identifies it among running turns.

        Called at most once per turn, from the event loop, soon after the client hung up
        while `run_turn(spec)` was running; the turn may have finished meanwhile, so
        cancelling a finished turn must be a no-op. `run_turn` should then end soon, either
        by raising `asyncio.CancelledError` (nothing is recorded) or by returning the
        `TurnResult` of the work done (recorded in the metrics like any turn). No client sees
        either. Exceptions raised here are logged and otherwise ignored.
        """
        ...


CancelFn = Callable[[TurnSpec], Awaitable[None]]


class Hangups:
    """The front door's half of cancellation: a handler awaiting a turn is cancelled by
    aiohttp when its client disconnects; if the turn is still running, count the hang-up and
    ask the backend (if it can) to cancel the turn."""

    def __init__(self, backend: TurnBackend, on_hangup: Callable[[], None]) -> None:
        self._cancel: CancelFn | None = getattr(backend, "cancel_turn", None)
        self._on_hangup = on_hangup
        self._pending: set[asyncio.Task[None]] = set()  # strong refs until they finish
        self._stopping = False

    async def follow(
        self, spec: TurnSpec, task: asyncio.Task[TurnResult], client_gone: Callable[[], bool]
    ) -> TurnResult:
        """Await the detached turn `task`, cancelling the turn if the client hangs up."""
        with self.watch(spec, task, client_gone):
            return await asyncio.shield(task)

    @contextmanager
    def watch(
        self, spec: TurnSpec, task: asyncio.Task[TurnResult], client_gone: Callable[[], bool]
    ) -> Iterator[None]:
        try:
            yield
        except asyncio.CancelledError:
            if not task.done() and not self._stopping and client_gone():
                self._hung_up(spec)
            raise

    def stop(self) -> None:
        """The server is shutting down: aiohttp cancels the remaining handlers and closes
        their connections itself. Those are no hang-ups; their turns are left to the
        runner's bounded drain (`TurnRunner.close`)."""
        self._stopping = True

    def _hung_up(self, spec: TurnSpec) -> None:
        self._on_hangup()
        if self._cancel is None:
            return
        task = asyncio.create_task(self._run_cancel(self._cancel, spec))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _run_cancel(self, cancel: CancelFn, spec: TurnSpec) -> None:
        try:
            await cancel(spec)
        except Exception:
            log.exception("cancel_turn failed (session %d, turn %d)", spec.session, spec.turn)

    async def close(self, timeout_s: float = 5.0) -> None:
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)
