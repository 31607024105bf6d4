"""What one service process is told on its command line (`dualpath serve ROLE ...`)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROLES = ("scheduler", "storage", "prefill", "decode")
# The shared secret of a run. Read from the environment or a file, never from argv: a
# command line is visible to every local user in `ps` and /proc/PID/cmdline.
TOKEN_ENV = "DUALPATH_TOKEN"
# A guessable token is no token; 16 characters of a random hex/base64 string is ~64+ bits.
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Only a loopback bind is reachable from this machine alone. A name other than
    `localhost` (e.g. a compose service name) resolves to a routable address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str, where: str) -> str:
    """The token as gRPC metadata and an HTTP header can carry it (visible ASCII), long
    enough not to be guessed; ValueError (one line, naming `where`) otherwise."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"{where}: the token has {len(token)} characters, need >= {MIN_TOKEN_CHARS} "
            "(e.g. `openssl rand -hex 32`)"
        )
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ValueError(f"{where}: the token must be visible ASCII (no spaces or newlines)")
    return token


def load_token(token_file: Path | None, env: Mapping[str, str] | None = None) -> str | None:
    """The run's token: `--token-file` (one line, surrounding whitespace ignored) wins over
    $DUALPATH_TOKEN; an empty or unset variable means no token."""
    if token_file is not None:
        try:
            text = token_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-file {token_file}: cannot read it ({exc})") from None
        return check_token(text.strip(), f"--token-file {token_file}")
    value = (os.environ if env is None else env).get(TOKEN_ENV, "").strip()
    return check_token(value, f"${TOKEN_ENV}") if value else None


@dataclass(frozen=True, slots=True)
class ServeOptions:
    role: str
    redis_url: str
    run_id: str = "default"
    node: int = 0  # node index (prefill/decode)
    host: str = "127.0.0.1"
    grpc_port: int = 0  # 0: any free port (the registry tells peers which)
    admin_port: int = 0  # /healthz and /metrics (the scheduler serves them on http_port)
    http_port: int = 8000  # scheduler: the OpenAI-compatible front door
    epoch: float | None = None  # perf_counter() value of emulated t = 0 (else from Redis)
    dilation: float = 1.0  # emulated seconds per wall second (`--speedup`)
    real_payload: float = 0.0  # 0: virtual payloads; else ship SCALE x the emulated bytes
    rpc_timeout_s: float = 10.0  # deadline of control calls (wall seconds)
    transfer_timeout_s: float = 600.0  # deadline of calls that wait for emulated work
    max_concurrent_rpcs: int = 20_000  # beyond: RESOURCE_EXHAUSTED (shed, don't queue)
    max_inflight: int = 4096  # scheduler: turns in flight before HTTP 429
    # scheduler: HTTP 429 while the oldest admitted turn has waited longer than this for its
    # prefill (emulated s; admission.py)
    max_queue_delay_s: float = 8.0
    heartbeat_ttl_s: float = 3.0
    grace_s: float = 5.0  # SIGTERM: in-flight RPCs get this long
    discovery_timeout_s: float = 60.0
    # Shared secret every gRPC call and the admin HTTP app require
    # (runtimes/process/serving/host.py); kept
    # out of repr so that logging the options never prints it.
    token: str | None = field(default=None, repr=False)
    insecure: bool = False  # `--insecure`: a non-loopback bind without a token, on purpose

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"ROLE: unknown role {self.role!r}; accepted: {', '.join(ROLES)}")
        if not self.dilation > 0:
            raise ValueError("--speedup: must be > 0 (emulated seconds per wall second)")
        if self.real_payload < 0:
            raise ValueError("--real-payload: must be >= 0 (0 = virtual payloads)")
        if self.token is None and not self.insecure and not is_loopback(self.host):
            raise ValueError(
                f"--host {self.host}: binding a non-loopback address needs a shared token "
                f"(--token-file PATH or ${TOKEN_ENV}); pass --insecure to run open on purpose"
            )

    @property
    def name(self) -> str:
        return f"{self.role}{self.node}" if self.role in ("prefill", "decode") else self.role

    def transfer_deadline(self) -> float:
        """Calls that wait for emulated work: their emulated length, in wall seconds, is
        unknown up front, so they get a long but finite deadline."""
        return self.transfer_timeout_s
