"""OpenAI-shaped errors, and the middleware that guarantees every failure is one.

Clients (the official SDKs included) parse `{"error": {message, type, param, code}}`, so
routing errors, oversized bodies and even our own bugs come back in that shape, never as
aiohttp's HTML pages or a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

log = logging.getLogger(__name__)

INVALID = "invalid_request_error"
MAX_BODY_BYTES = 8 * 1024 * 1024


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


def _from_http(exc: web.HTTPException, request: web.Request) -> ApiError:
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
        return ApiError(
            413,
            f"Request body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB; send less",
            code="request_too_large",
        )
    return ApiError(status, exc.reason or "HTTP error", code=None)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http(exc, request).response()
    except Exception:
        # A bug of ours: log it here, give the client a clean body instead of a traceback.
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return ApiError(
            500, "Internal error in the front door", type_="server_error", code="internal_error"
        ).response()
