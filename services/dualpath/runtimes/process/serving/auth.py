"""Token authentication for a service's gRPC server and HTTP apps (docs/services.md,
"Security"): a gRPC interceptor and an aiohttp middleware that refuse a request without
`authorization: Bearer TOKEN`, in constant time, before it is parsed. The health answers
stay open."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dualpath.runtimes.process.serving.peers import AUTH_HEADER, bearer

# Reachable without the token: the standard gRPC health service (Kubernetes' native gRPC
# probes and compose's `dualpath.probe` cannot send metadata; it says SERVING or not and
# nothing else) and the HTTP health answers (probes and load balancers; they tell the
# service's state, not its traffic). Everything else needs it: the services' own gRPC
# methods (they move and verify KV, enqueue work) and /metrics.
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
HEALTH_PATHS = frozenset({"/healthz", "/livez"})
if TYPE_CHECKING:  # generic only in the type stubs
    RpcHandler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
else:
    RpcHandler = grpc.RpcMethodHandler
UNAUTHENTICATED = "missing or wrong token (send `authorization: Bearer TOKEN`)"


def _token_ok(presented: str | bytes | None, want: bytes) -> bool:
    if presented is None:
        return False
    got = presented.encode() if isinstance(presented, str) else presented
    return hmac.compare_digest(got, want)  # constant time: no timing oracle on the token


class TokenCheck(grpc.aio.ServerInterceptor):
    """Refuses every call without `authorization: Bearer TOKEN` with UNAUTHENTICATED, before
    the servicer runs or the request is even parsed; the health service is exempt."""

    def __init__(self, token: str) -> None:
        self._want = bearer(token).encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[RpcHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> RpcHandler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(HEALTH_METHOD_PREFIX):
            return handler
        metadata = handler_call_details.invocation_metadata
        if any(k == AUTH_HEADER and _token_ok(v, self._want) for k, v in metadata or ()):
            return handler
        return _denied(handler)


def _denied(handler: RpcHandler) -> RpcHandler:
    """A handler of the same kind as `handler` that aborts with UNAUTHENTICATED. No request
    deserializer: an unauthenticated peer's bytes are never parsed."""

    async def deny(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED)

    ser = handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(deny, response_serializer=ser)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(deny, response_serializer=ser)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(deny, response_serializer=ser)
    return grpc.stream_stream_rpc_method_handler(deny, response_serializer=ser)


def token_middleware(token: str, protects: Callable[[str], bool]) -> Middleware:
    """HTTP: 401 (JSON, in the front door's error shape) for a path `protects` names unless
    the request has `Authorization: Bearer TOKEN`."""
    want = bearer(token).encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if protects(request.path) and not _token_ok(request.headers.get("Authorization"), want):
            body = {"error": {"message": UNAUTHENTICATED, "type": "unauthorized", "code": None}}
            headers = {"WWW-Authenticate": 'Bearer realm="dualpath"'}
            return web.json_response(body, status=401, headers=headers)
        return await handler(request)

    return auth
