"""Request-body parsing: every rejection names the field and says what would be accepted.

`BodyReader` turns a request into its JSON object and whatever the endpoint derives from it
(token ids, block hashes). aiohttp's own decompression is off (`auto_decompress=False` in
the app) because it runs on the event loop, also while aiohttp drains a refused body: a
gzip bomb stalled the loop for ~1 s. Large and compressed bodies are decoded, parsed and
tokenized in one worker thread instead.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from aiohttp import web

from dualpath.runtimes.process.frontdoor.errors import KIB, ApiError, bad_param, too_large

Body = dict[str, Any]
T = TypeVar("T")

# Below this a body tokenizes in under ~20 ms (>= 1 byte per token, ~1.2 us per token): the
# hop to the worker thread is not worth it.
OFFLOAD_BYTES = 16 * KIB
ENCODINGS = ("gzip", "deflate")
_SURROGATE = re.compile("[\\ud800-\\udfff]")


class BodyReader:
    """Reads request bodies; big or compressed ones are handled off the event loop.

    One worker: JSON parsing and tokenizing hold the GIL, so more threads would add no
    throughput, only contention with the loop. While the worker runs Python code (the
    tokenizer) the loop gets the GIL back within the 5 ms switch interval; a C-level
    `json.loads` holds it throughout, which `errors.MAX_BODY_BYTES` bounds.
    """

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="frontdoor-body")

    async def read(self, request: web.Request, extract: Callable[[Body], T]) -> tuple[Body, T]:
        """The body object and `extract(body)` (which must be pure: it may run in a thread)."""
        encoding = content_encoding(request)
        try:
            raw = await request.read()  # raises 413 past the app's client_max_size
        except web.RequestPayloadError as exc:
            raise ApiError(400, f"Request body could not be read ({exc}); resend it") from None
        if encoding is None and len(raw) <= OFFLOAD_BYTES:
            return parse(raw, extract)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, _decode, raw, encoding, self.max_body, extract
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def content_encoding(request: web.Request) -> str | None:
    """The body's one content coding we can decode, None for identity; else 415."""
    codings = [
        c.strip().lower()
        for value in request.headers.getall("Content-Encoding", ())
        for c in value.split(",")
    ]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in ENCODINGS:
        return codings[0]
    raise ApiError(
        415,
        f"Unsupported Content-Encoding '{', '.join(codings)}'; send the body uncompressed "
        f"or with one of: {', '.join(ENCODINGS)}",
        param="Content-Encoding",
        code="unsupported_content_encoding",
    )


def _decode(
    raw: bytes, encoding: str | None, max_body: int, extract: Callable[[Body], T]
) -> tuple[Body, T]:
    with _gc_paused():
        if encoding is not None:
            raw = decompress(raw, encoding, max_body)
        return parse(raw, extract)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing `[{...}, {...}, ...]` allocates ~10^5 containers, each burst triggering
    full collections that walk every object of the process while holding the GIL: after
    the fuzz test (~4*10^5 objects) a 4 MiB body stalled the loop 0.3-0.45 s this way, and
    0.07 s with collection paused. The body is acyclic (refcounting frees it) and this is
    the only worker, so pausing the (process-wide) collector for one parse is safe."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decompress(raw: bytes, encoding: str, limit: int) -> bytes:
    """Inflate at most `limit` bytes: a small bomb costs no more than an allowed body."""
    if not raw:
        return raw
    # deflate means zlib-wrapped (RFC 9110), but raw deflate is common; aiohttp took both.
    wrapped = len(raw) > 1 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0
    wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else wbits)
    fix = f"compress the body with {encoding} or drop the Content-Encoding header"
    try:
        out = inflate.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ApiError(
            400,
            f"Request body is not valid {encoding} data ({exc}); {fix}",
            param="Content-Encoding",
            code="invalid_encoding",
        ) from None
    if len(out) > limit:
        raise too_large(limit, what="Decompressed request body")
    if not inflate.eof or inflate.unused_data:
        raise ApiError(
            400,
            f"Request body is a truncated {encoding} stream or has data after it; {fix}",
            param="Content-Encoding",
            code="invalid_encoding",
        )
    return out


def parse(raw: bytes, extract: Callable[[Body], T]) -> tuple[Body, T]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"Request body is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return body, extract(body)


def text(where: str, value: str) -> str:
    """`value`, to be tokenized. JSON admits unpaired UTF-16 surrogates ("\\ud800"), which
    have no UTF-8 form and so no token: reject them, naming the field."""
    if not value.isascii():
        found = _SURROGATE.search(value)
        if found is not None:
            raise bad_param(
                where,
                f"'{where}' contains an unpaired UTF-16 surrogate "
                f"(\\u{ord(found.group()):04x} at character {found.start()}); send valid "
                "Unicode: astral characters as a surrogate pair or as UTF-8",
            )
    return value


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
