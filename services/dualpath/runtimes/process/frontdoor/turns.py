"""Running turns on the backend: the in-flight bound, error mapping and metrics.

Each turn runs as its own task, detached from the HTTP handler, so a client that hangs up
mid-stream (or a handler that aiohttp cancels) never cancels a turn the emulated cluster
has already admitted: its KV blocks are read and consumed either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from dualpath.runtimes.process.frontdoor.backend import (
    BackendBusy,
    BackendUnavailable,
    BadTurn,
    StreamingBackend,
    TokensFn,
    TurnBackend,
    TurnResult,
    TurnSpec,
    accepts_tokens,
)
from dualpath.runtimes.process.frontdoor.errors import ApiError
from dualpath.runtimes.process.frontdoor.metrics import FrontDoorMetrics

log = logging.getLogger(__name__)

RETRY_AFTER = {"Retry-After": "1"}


@dataclass(frozen=True, slots=True)
class Limits:
    model: str
    block_tokens: int
    max_prompt_tokens: int
    max_gen_tokens: int


def busy(message: str) -> ApiError:
    return ApiError(
        429, message, type_="rate_limit_error", code="rate_limit_exceeded", headers=RETRY_AFTER
    )


class TurnRunner:
    def __init__(self, backend: TurnBackend, metrics: FrontDoorMetrics, max_inflight: int) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be >= 1")
        self._backend = backend
        self.streams_tokens = accepts_tokens(backend)
        self._metrics = metrics
        self.max_inflight = max_inflight
        self._inflight = 0
        # strong refs (tasks are detached) and what each runs, for the end listeners
        self._tasks: dict[asyncio.Task[TurnResult], TurnSpec] = {}
        self._end_listeners: list[Callable[[TurnSpec], None]] = []

    @property
    def inflight(self) -> int:
        return self._inflight

    def on_end(self, listener: Callable[[TurnSpec], None]) -> None:
        """Call `listener(spec)` when a turn ends, however it ends (done, failed, cancelled)."""
        self._end_listeners.append(listener)

    def check_capacity(self) -> None:
        if self._inflight >= self.max_inflight:
            raise busy(f"{self.max_inflight} turns already in flight; retry after 1 s")

    def start(
        self,
        spec: TurnSpec,
        first_token: Callable[[], None] | None = None,
        on_tokens: TokensFn | None = None,
    ) -> asyncio.Task[TurnResult]:
        """Admit a turn (or raise 429) and run it detached; await it via `asyncio.shield`.

        `on_tokens` reaches the backend only if it can report tokens (`streams_tokens`)."""
        self.check_capacity()
        self._inflight += 1
        self._metrics.running.inc()
        task = asyncio.create_task(self._run(spec, first_token, on_tokens))
        self._tasks[task] = spec
        task.add_done_callback(self._finished)
        return task

    async def run(self, spec: TurnSpec) -> TurnResult:
        return await asyncio.shield(self.start(spec))

    async def _run(
        self, spec: TurnSpec, first_token: Callable[[], None] | None, on_tokens: TokensFn | None
    ) -> TurnResult:
        try:
            if on_tokens is not None and self.streams_tokens:
                backend = cast(StreamingBackend, self._backend)
                result = await backend.run_turn(spec, first_token, on_tokens=on_tokens)
            else:  # the original two-argument call: backends without on_tokens still work
                result = await self._backend.run_turn(spec, first_token)
        except BackendBusy as exc:
            raise busy(f"The cluster's queue is full ({exc}); retry after 1 s") from exc
        except BackendUnavailable as exc:
            raise ApiError(
                503,
                f"The cluster cannot serve right now ({exc}); retry later",
                type_="server_error",
                code="service_unavailable",
            ) from exc
        except BadTurn as exc:
            raise ApiError(400, str(exc), param=exc.param, code="invalid_value") from exc
        self._metrics.observe(result)
        return result

    def _finished(self, task: asyncio.Task[TurnResult]) -> None:
        spec = self._tasks.pop(task)
        for listener in self._end_listeners:
            listener(spec)
        self._inflight -= 1
        self._metrics.running.dec()
        if task.cancelled():
            self._metrics.aborted()
            return
        exc = task.exception()  # retrieved here so an orphaned failure is logged once
        if exc is not None and not isinstance(exc, ApiError):
            log.error("turn failed in the backend", exc_info=exc)

    async def close(self, timeout_s: float = 30.0) -> None:
        """Let admitted turns finish (bounded), then cancel the stragglers."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
