"""OpenAI-shaped errors, and the middleware that guarantees every failure is one.

Clients (the official SDKs included) parse `{"error": {message, type, param, code}}`, so
routing errors, oversized bodies, refused `Expect` headers and even our own bugs come back
in that shape, never as aiohttp's text/HTML pages or a traceback. Only requests aiohttp's
HTTP parser rejects before any app code runs (a malformed request line or header, an
unknown method, Content-Length with Transfer-Encoding, a header over 8 KiB) keep aiohttp's
plain-text 400.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import HttpVersion11, web
from aiohttp.typedefs import Handler, Middleware

log = logging.getLogger(__name__)

INVALID = "invalid_request_error"
KIB = 1024
MIB = 1024 * KIB
# Ceiling, whatever the prompt limit: `json.loads` holds the GIL (~20 ms per MiB of a
# hostile body, e.g. `[{}, {}, ...]`, on a 2-core CI box), so this keeps a worst-case parse
# under ~0.1 s of event-loop stall, half the 0.2 s /healthz budget.
MAX_BODY_BYTES = 4 * MIB
# Bytes a prompt token may take in a body: a token id with its separator (<= 11 B, 16 with
# pretty-printing) and the densest text token, a JSON-escaped astral character with its
# space (" \ud83d\ude00", 13 B). English text needs 4-5 B per token.
BYTES_PER_TOKEN = 16
BODY_SLACK = 256 * KIB  # every other field: sampling options, tool schemas, ids
UNMATCHED = "unmatched"  # the catch-all route's name

ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def body_cap(prompt_limit: int) -> int:
    """The largest request body worth reading: the largest allowed prompt, densely written."""
    return min(MAX_BODY_BYTES, BODY_SLACK + BYTES_PER_TOKEN * prompt_limit)


def size(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.3g} MiB"
    return f"{n / KIB:.3g} KiB" if n >= KIB else f"{n} bytes"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        type_: str = INVALID,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers)


def bad_param(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def too_large(max_body: int, got: int | None = None, what: str = "Request body") -> ApiError:
    seen = f" of {size(got)}" if got is not None else ""
    return ApiError(
        413,
        f"{what}{seen} is over the limit of {size(max_body)} (the largest allowed prompt at "
        f"{BYTES_PER_TOKEN} bytes per token + {size(BODY_SLACK)}, at most "
        f"{size(MAX_BODY_BYTES)}); send a shorter prompt",
        code="request_too_large",
    )


def _from_http(exc: web.HTTPException, request: web.Request, max_body: int) -> ApiError:
    status = exc.status
    if status == 404:
        return ApiError(404, f"No route {request.path!r}; see GET /v1/models", code="not_found")
    if status == 405:
        allow = exc.headers.get("Allow", "")
        return ApiError(
            405,
            f"Method {request.method} is not allowed on {request.path}; use {allow}",
            code="method_not_allowed",
            headers={"Allow": allow},
        )
    if status == 413:
        return too_large(max_body, request.content_length)
    return ApiError(status, exc.reason or "HTTP error", code=None)


def error_middleware(max_body: int = MAX_BODY_BYTES) -> Middleware:
    """Shapes every failure of a handler; `max_body` is the app's body cap (for 413s)."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _from_http(exc, request, max_body).response()
        except Exception:
            # A bug of ours: log it here, give the client a clean body, not a traceback.
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return ApiError(
                500, "Internal error in the front door", type_="server_error", code="internal_error"
            ).response()

    return errors


async def unmatched(request: web.Request) -> web.StreamResponse:
    """The catch-all route: 405 for a known path, else 404. A request no route matched
    would get aiohttp's own `Expect` handling (a plain-text 417) before any middleware."""
    allowed = sorted(
        route.method
        for resource in request.app.router.resources()
        if resource.name != UNMATCHED and resource.canonical == request.path
        for route in resource
    )
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


def expect_handler(max_body: int) -> ExpectHandler:
    """`Expect: 100-continue` as aiohttp handles it, but a body announced over the cap is
    refused before the client sends it, and other expectations get a JSON 417 (RFC 9110
    §10.1.1); returning a response skips the route's handler and middlewares."""

    async def expect(request: web.Request) -> web.StreamResponse | None:
        if request.version < HttpVersion11:
            return None  # HTTP/1.0 clients cannot send Expect: ignore it
        value = request.headers.get("Expect", "")
        if value.lower() != "100-continue":
            return ApiError(
                417,
                f"Unsupported 'Expect: {value}'; send 'Expect: 100-continue' or no Expect",
                param="Expect",
                code="expectation_failed",
            ).response()
        if (request.content_length or 0) > max_body:
            return too_large(max_body, request.content_length).response()
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the final response still has to go out
        return None

    return expect
