"""Request-body parsing: every rejection names the field and says what would be accepted."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from dualpath.frontdoor.errors import ApiError, bad_param

Body = dict[str, Any]


async def read_json(request: web.Request) -> Body:
    raw = await request.read()  # raises 413 past the app's client_max_size
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"Request body is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return body


def opt_int(body: Body, name: str, default: int | None, lo: int, hi: int | None = None) -> int:
    value = body.get(name)
    if value is None:
        if default is None:
            raise bad_param(name, f"'{name}' is required: an integer >= {lo}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_param(name, f"'{name}' must be an integer, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        upper = f" and <= {hi}" if hi is not None else ""
        raise bad_param(name, f"'{name}' must be >= {lo}{upper}, got {value}")
    return value


def opt_bool(body: Body, name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_param(name, f"'{name}' must be true or false")
    return value


def opt_str(body: Body, name: str, max_len: int) -> str | None:
    """A string field; absent, null or "" all mean "not given"."""
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad_param(name, f"'{name}' must be a string")
    if len(value) > max_len:
        raise bad_param(name, f"'{name}' must be at most {max_len} characters")
    return value


def check_model(body: Body, served: str) -> None:
    """`model` may be omitted (curl convenience); if given it must be the served model."""
    value = body.get("model")
    if value is None:
        return
    if not isinstance(value, str):
        raise bad_param("model", "'model' must be a string")
    if value != served:
        raise ApiError(
            404,
            f"The model '{value}' does not exist; this server serves '{served}'",
            param="model",
            code="model_not_found",
        )


def check_n(body: Body) -> None:
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise bad_param("n", "'n' must be 1 (or omitted): one choice per request")


def include_usage(body: Body) -> bool:
    """`stream_options.include_usage`; ignored (but type-checked) when not streaming."""
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad_param("stream_options", "'stream_options' must be an object")
    value = options.get("include_usage")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_param("stream_options.include_usage", "'include_usage' must be true or false")
    return value


def affinity(request: web.Request, body: Body) -> str | None:
    """The conversation key: header `X-Session-Id` wins over the OpenAI `user` field."""
    header = request.headers.get("X-Session-Id", "").strip()
    if header:
        if len(header) > 256:
            raise bad_param("X-Session-Id", "'X-Session-Id' must be at most 256 characters")
        return header
    return opt_str(body, "user", 256)
