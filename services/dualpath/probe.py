"""`python -m dualpath.probe --grpc HOST:PORT | --http URL`: one health check, as an exit code.

Compose healthchecks run a command inside the container, and the slim image has neither curl
nor grpc_health_probe; this module needs only what the image already ships. Exit 0 when the
service is ready, else 1 with one line on stderr (Docker keeps it in `docker inspect`), never
a traceback: an unreachable service is the expected failure, not a bug.

- `--grpc HOST:PORT`: standard `grpc.health.v1.Health/Check` of the overall service `""`,
  which a `dualpath serve` process flips to SERVING once every peer of its run registered.
- `--http URL`: GET, ready when the answer is 200 with a JSON body whose `ready` is true
  (the `/healthz` of the admin app and of the scheduler's HTTP front door).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

DEFAULT_TIMEOUT_S = 2.0


def check_grpc(target: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """None when `target` reports SERVING for service "", else why not (one line)."""
    # Imported here: the --http path must not pay for loading grpc.
    import grpc
    from grpc_health.v1 import health_pb2

    # A probe checks this address directly: an http_proxy in the environment must not
    # turn "nothing listens here" into a proxy's answer.
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(target, options=options) as channel:
        # The raw method rather than HealthStub: its typing stub declares no methods.
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        try:
            reply = check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError as exc:
            return f"{target}: {_rpc_error(exc)}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def check_http(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """None when GET `url` answers 200 with JSON `{"ready": true, ...}`, else why not."""
    # No proxies, for the same reason as in check_grpc.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            status: int = resp.status
            body: bytes = resp.read()
    except urllib.error.HTTPError as exc:  # before URLError: it is a subclass
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"{url}: {_one_line(str(reason))}"
    if status != 200:
        return f"{url}: HTTP {status}"
    try:
        data = json.loads(body)
    except ValueError:
        return f"{url}: the body is not JSON"
    if not isinstance(data, dict) or data.get("ready") is not True:
        ready = data.get("ready") if isinstance(data, dict) else None
        return f"{url}: not ready (ready={json.dumps(ready)})"
    return None


def _rpc_error(exc: Exception) -> str:
    # What a failed call raises is also a grpc.Call (status code and details); a bare
    # RpcError is not, and then its text is all there is.
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{getattr(code(), 'name', code())}: {_one_line(str(details() or ''))}"
    return _one_line(str(exc))


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "no details"


def build_parser() -> argparse.ArgumentParser:
    """The command line (also used by the deploy-file tests to check healthcheck commands)."""
    parser = argparse.ArgumentParser(
        prog="python -m dualpath.probe",
        description="Exit 0 if a dualpath service is ready, else 1 (one line on stderr).",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--grpc", metavar="HOST:PORT", help='gRPC health Check of service ""')
    what.add_argument("--http", metavar="URL", help="GET; ready on 200 and JSON ready=true")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"deadline of the check (default {DEFAULT_TIMEOUT_S:g})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout: must be > 0")
    problem = (
        check_grpc(args.grpc, args.timeout) if args.grpc else check_http(args.http, args.timeout)
    )
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
