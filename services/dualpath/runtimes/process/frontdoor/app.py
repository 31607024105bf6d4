"""The scheduler's HTTP front door: OpenAI-compatible and native agent endpoints.

`make_app` wires the routes to an abstract `TurnBackend`; see docs/frontdoor.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from dualpath.runtimes.process.frontdoor.agent_api import AgentApi, NativeSessions
from dualpath.runtimes.process.frontdoor.backend import Hangups, TurnBackend
from dualpath.runtimes.process.frontdoor.errors import (
    UNMATCHED,
    ApiError,
    ExpectHandler,
    body_cap,
    error_middleware,
    expect_handler,
    unmatched,
)
from dualpath.runtimes.process.frontdoor.metrics import FrontDoorMetrics
from dualpath.runtimes.process.frontdoor.openai_api import OpenAIApi
from dualpath.runtimes.process.frontdoor.params import BodyReader
from dualpath.runtimes.process.frontdoor.sessions import PrefixSessions
from dualpath.runtimes.process.frontdoor.tokenizer import Codec
from dualpath.runtimes.process.frontdoor.turns import Limits, TurnRunner

log = logging.getLogger(__name__)

RUNNER_KEY = web.AppKey("dualpath_frontdoor_runner", TurnRunner)
HealthFn = Callable[[], Mapping[str, Any]]


def make_app(
    backend: TurnBackend,
    *,
    model: str,
    block_tokens: int,
    max_prompt_tokens: int,
    max_gen_tokens: int,
    registry: CollectorRegistry | None = None,
    extra_health: HealthFn | None = None,
    max_inflight: int = 4096,
    max_sessions: int = 100_000,
    max_context_tokens: int | None = None,
    tokenizer: Codec | None = None,
) -> web.Application:
    """An aiohttp app serving `model` on top of `backend`.

    `registry` receives the front-door metrics (a fresh one per app if None, never the
    process-global default, so several apps can live in one process). `max_inflight`
    bounds turns in flight (beyond: 429); `max_sessions` bounds each session table (LRU).
    Prompts are limited to `max_prompt_tokens` (what the cluster can hold) and to the model's
    `max_context_tokens` if given; the body cap follows from that limit (`body_cap`).
    `tokenizer` counts prompts and spells the output (the offline stand-in if None).
    """
    if min(block_tokens, max_prompt_tokens, max_gen_tokens) < 1:
        raise ValueError("block_tokens, max_prompt_tokens and max_gen_tokens must be >= 1")
    if max_context_tokens is not None and max_context_tokens < 1:
        raise ValueError("max_context_tokens must be >= 1 (or None: no model limit)")
    if registry is None:
        registry = CollectorRegistry()
    metrics = FrontDoorMetrics(registry, model)
    runner = TurnRunner(backend, metrics, max_inflight)
    prompt_limit = min(max_prompt_tokens, max_context_tokens or max_prompt_tokens)
    limits = Limits(model, block_tokens, prompt_limit, max_gen_tokens)
    max_body = body_cap(prompt_limit)
    reader = BodyReader(max_body)
    disconnects = Counter(
        "dualpath_http_client_disconnects",
        "HTTP clients that hung up before their turn finished",
        registry=registry,
    )
    hangups = Hangups(backend, disconnects.inc)
    # One content-addressed index for both dialects: token blocks and a client's block ids
    # hash apart, so they never match each other, and chain ids stay unique.
    prefixes = PrefixSessions(block_tokens, max_sessions)
    runner.on_end(lambda spec: prefixes.release(spec.session))
    openai = OpenAIApi(limits, prefixes, runner, reader, hangups, tokenizer)
    agent = AgentApi(limits, NativeSessions(max_sessions), runner, prefixes, reader, hangups)

    app = web.Application(
        client_max_size=max_body,
        middlewares=[_counting(metrics), error_middleware(max_body)],  # counting sees final codes
        # Cancel a handler when its client disconnects (how hang-ups reach `Hangups`), and
        # leave decompression to `BodyReader`, off the loop and bounded.
        handler_args={"handler_cancellation": True, "auto_decompress": False},
    )
    app[RUNNER_KEY] = runner
    expect = _counted_expect(metrics, expect_handler(max_body))
    app.router.add_get("/v1/models", openai.models, expect_handler=expect)
    app.router.add_post("/v1/completions", openai.completions, expect_handler=expect)
    app.router.add_post("/v1/chat/completions", openai.chat_completions, expect_handler=expect)
    app.router.add_post("/v1/agent/turn", agent.turn, expect_handler=expect)
    app.router.add_get("/healthz", _health(extra_health), expect_handler=expect)
    app.router.add_get("/metrics", _metrics(registry), expect_handler=expect)
    # Last: every other method and path, so their errors pass the app's Expect handling.
    app.router.add_route("*", "/{tail:.*}", unmatched, name=UNMATCHED, expect_handler=expect)

    async def stopping(_: web.Application) -> None:
        hangups.stop()

    async def close(_: web.Application) -> None:
        await runner.close()
        await hangups.close()
        reader.close()

    app.on_shutdown.append(stopping)
    app.on_cleanup.append(close)
    return app


def _endpoint(request: web.Request) -> str:
    # Route templates, not raw paths: unknown URLs must not grow the label set.
    resource = request.match_info.route.resource
    if resource is None or resource.name == UNMATCHED:
        return UNMATCHED
    return resource.canonical


def _counting(metrics: FrontDoorMetrics) -> Any:
    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        metrics.http.labels(_endpoint(request), str(response.status)).inc()
        return response

    return count


def _counted_expect(metrics: FrontDoorMetrics, expect: ExpectHandler) -> ExpectHandler:
    """A refused `Expect` answers before the middlewares run: count it here."""

    async def counted(request: web.Request) -> web.StreamResponse | None:
        response = await expect(request)
        if response is not None:
            metrics.http.labels(_endpoint(request), str(response.status)).inc()
        return response

    return counted


def _health(extra: HealthFn | None) -> Handler:
    async def health(request: web.Request) -> web.StreamResponse:
        try:
            details = dict(extra()) if extra is not None else {}
        except Exception as exc:
            log.exception("health probe failed")
            raise ApiError(
                503, f"Health probe failed: {exc}", type_="server_error", code="unhealthy"
            ) from exc
        return web.json_response({"status": "ok", **details})

    return health


def _metrics(registry: CollectorRegistry) -> Handler:
    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return metrics
