"""The scheduler's HTTP front door: OpenAI-compatible and native agent endpoints.

`make_app` wires the routes to an abstract `TurnBackend`; see docs/frontdoor.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dualpath.frontdoor.agent_api import AgentApi, NativeSessions
from dualpath.frontdoor.backend import TurnBackend
from dualpath.frontdoor.errors import MAX_BODY_BYTES, ApiError, error_middleware
from dualpath.frontdoor.metrics import FrontDoorMetrics
from dualpath.frontdoor.openai_api import OpenAIApi
from dualpath.frontdoor.sessions import PrefixSessions
from dualpath.frontdoor.turns import Limits, TurnRunner

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
) -> web.Application:
    """An aiohttp app serving `model` on top of `backend`.

    `registry` receives the front-door metrics (a fresh one per app if None, never the
    process-global default, so several apps can live in one process). `max_inflight`
    bounds turns in flight (beyond: 429); `max_sessions` bounds each session table (LRU).
    """
    if min(block_tokens, max_prompt_tokens, max_gen_tokens) < 1:
        raise ValueError("block_tokens, max_prompt_tokens and max_gen_tokens must be >= 1")
    if registry is None:
        registry = CollectorRegistry()
    metrics = FrontDoorMetrics(registry, model)
    runner = TurnRunner(backend, metrics, max_inflight)
    limits = Limits(model, block_tokens, max_prompt_tokens, max_gen_tokens)
    # One content-addressed index for both dialects: token blocks and a client's block ids
    # hash apart, so they never match each other, and chain ids stay unique.
    prefixes = PrefixSessions(block_tokens, max_sessions)
    runner.on_end(lambda spec: prefixes.release(spec.session))
    openai = OpenAIApi(limits, prefixes, runner)
    agent = AgentApi(limits, NativeSessions(max_sessions), runner, prefixes)

    app = web.Application(
        client_max_size=MAX_BODY_BYTES,
        middlewares=[_counting(metrics), error_middleware],  # counting sees final codes
    )
    app[RUNNER_KEY] = runner
    app.router.add_get("/v1/models", openai.models)
    app.router.add_post("/v1/completions", openai.completions)
    app.router.add_post("/v1/chat/completions", openai.chat_completions)
    app.router.add_post("/v1/agent/turn", agent.turn)
    app.router.add_get("/healthz", _health(extra_health))
    app.router.add_get("/metrics", _metrics(registry))

    async def close_runner(_: web.Application) -> None:
        await runner.close()

    app.on_cleanup.append(close_runner)
    return app


def _counting(metrics: FrontDoorMetrics) -> Any:
    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        resource = request.match_info.route.resource
        # Route templates, not raw paths: unknown URLs must not grow the label set.
        endpoint = resource.canonical if resource is not None else "unmatched"
        metrics.http.labels(endpoint, str(response.status)).inc()
        return response

    return count


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
