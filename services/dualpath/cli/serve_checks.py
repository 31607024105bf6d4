"""The process runtime's commands' checks (`dualpath serve | up | run`): every flag and the
local machine are checked before any process starts, each failure one line naming the flag
and the fix (cli/serve.py)."""

from __future__ import annotations

import math
from typing import Any

from dualpath.cli.common import MAX_SPEEDUP, fail

REDIS_PING_S = 2.0  # `up`/`run --redis-url`: an answering Redis replies in microseconds


def log_settings(fmt: str | None, level: str | None) -> tuple[str, str]:
    """The checked log format and level (flags, else the environment)."""
    from dualpath.logs import resolve

    try:
        return resolve(fmt, level)
    except ValueError as exc:
        fail(str(exc))
        raise  # (unreachable: fail exits)


def check_flags(
    speedup: float, real_payload: float, ports: dict[str, int], redis_url: str | None
) -> None:
    """The process runtime's own flags, checked before anything starts (typer accepts nan
    and inf for a float, and a port is just an int to it)."""
    if not (math.isfinite(speedup) and 0 < speedup <= MAX_SPEEDUP):
        fail(
            f"--speedup {speedup}: must be > 0 and <= {MAX_SPEEDUP:,.0f} "
            "(emulated seconds per wall second)"
        )
    if not (math.isfinite(real_payload) and 0 <= real_payload <= 1):
        fail(
            f"--real-payload {real_payload}: must be 0 (virtual payloads) to 1 (the emulated "
            "bytes themselves; each transfer is capped at 64 MiB)"
        )
    for flag, port in ports.items():
        if not 0 <= port < 65536:
            fail(f"{flag} {port}: must be a TCP port, 0..65535 (0 = any free port)")
    if redis_url is not None:
        check_redis_url(redis_url)


def check_redis_url(url: str) -> None:
    import redis

    from dualpath.runtimes.process.control.resilience import redact_url

    try:
        redis.ConnectionPool.from_url(url).disconnect()  # parses only, connects to nothing
    except ValueError as exc:
        fail(f"--redis-url {redact_url(url)!r}: {exc}, e.g. redis://127.0.0.1:6379/0")


def check_redis_answers(url: str) -> None:
    """`up`/`run` are handed a Redis that should already be serving: ask it once, briefly,
    instead of starting every service only to watch them fail to register."""
    import redis

    from dualpath.runtimes.process.control.resilience import redact_url

    client = redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_PING_S, socket_timeout=REDIS_PING_S
    )
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        reason = " ".join(str(exc).split())
        fail(
            f"--redis-url {redact_url(url)}: cannot use this Redis ({reason}); start one "
            "there, or omit --redis-url to have a private one started"
        )
    finally:
        client.close()


def check_local_cluster(sc: Any) -> None:
    """`up`/`run` start one process per node: refuse a cluster this machine cannot hold,
    and a trace that does not parse (every service parses it as it starts: one error here
    instead of one per service, after they started)."""
    from dualpath.model.config.workload_sources import build_workload

    t = sc.topology
    procs = t.prefill_nodes + t.decode_nodes + 2  # + storage + scheduler
    if procs > sc.limits.max_processes:
        fail(
            f"topology: {t.prefill_nodes}P{t.decode_nodes}D needs {procs} local processes "
            f"(one per node + storage + scheduler), more than limits.max_processes="
            f"{sc.limits.max_processes}; use `dualpath sim` or Kubernetes for large clusters, "
            "or raise limits.max_processes"
        )
    if sc.workload.source != "synthetic":
        try:
            build_workload(sc)
        except ValueError as exc:  # TraceError names the file, line and field
            fail(str(exc))


def check_tokenizer(sc: Any, load: bool) -> None:
    """`up`/`run` load `frontdoor.tokenizer` once here (`load`): a bad one is one line and
    exit 2 before any process starts. `serve` only finds the file (a service started by
    `up` gets a checked one; loading it twice would slow every scheduler start)."""
    if sc.frontdoor.tokenizer is None:
        return
    from dualpath.runtimes.process.frontdoor.hf_tokenizer import (
        TokenizerError,
        load_tokenizer,
        resolve,
    )

    try:
        (load_tokenizer if load else resolve)(sc.frontdoor.tokenizer)
    except TokenizerError as exc:
        fail(str(exc))
