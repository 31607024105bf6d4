"""What one service process is told on its command line (`dualpath serve ROLE ...`)."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("scheduler", "storage", "prefill", "decode")


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

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"ROLE: unknown role {self.role!r}; accepted: {', '.join(ROLES)}")
        if not self.dilation > 0:
            raise ValueError("--speedup: must be > 0 (emulated seconds per wall second)")
        if self.real_payload < 0:
            raise ValueError("--real-payload: must be >= 0 (0 = virtual payloads)")

    @property
    def name(self) -> str:
        return f"{self.role}{self.node}" if self.role in ("prefill", "decode") else self.role

    def transfer_deadline(self) -> float:
        """Calls that wait for emulated work: their emulated length, in wall seconds, is
        unknown up front, so they get a long but finite deadline."""
        return self.transfer_timeout_s
