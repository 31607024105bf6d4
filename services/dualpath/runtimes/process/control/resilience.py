"""Staying up through a Redis outage: bounded calls, backoff, one log line per transition.

The control plane is not on the request path, so a service treats Redis as optional while it
runs: every call has a deadline, a failed call is retried later with backoff, and the outage
is logged once when it starts and once when it ends (not once per failed call).
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry  # (the client converts a sync Retry, with a warning)
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisError

# What an unreachable, restarting or hung Redis raises: redis-py's errors, refused or reset
# sockets, and the builtin TimeoutError of `asyncio.timeout` (an OSError subclass).
REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)

_log = logging.getLogger(__name__)


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***`, for messages and logs (a compose run's
    `--redis-url` is `redis://:PASSWORD@redis:6379/0`)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "(unparsable URL)"


def make_client(url: str, op_timeout_s: float) -> Redis:
    """A client whose every call ends within a few `op_timeout_s`.

    redis-py's own default retries ten times with up to 1 s between tries, so one command
    against a dead server takes several seconds; here two quick retries hide a dropped
    connection (e.g. the first command after a Redis restart) and anything longer surfaces
    at once, for the caller's loop to back off.
    """
    if not op_timeout_s > 0:
        raise ValueError(f"op_timeout_s={op_timeout_s!r} must be > 0")
    return Redis.from_url(
        url,
        socket_timeout=op_timeout_s,
        socket_connect_timeout=op_timeout_s,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.02), retries=2),
    )


class Outage:
    """Whether one component currently reaches Redis, and when to try again.

    `failed()` after a failed call returns the backoff delay (exponential with jitter,
    capped); `ok()` after a successful one ends the outage. Both log only on a transition.
    """

    def __init__(self, component: str, base_s: float = 0.05, cap_s: float = 2.0) -> None:
        if not 0 < base_s <= cap_s:
            raise ValueError(f"need 0 < base_s <= cap_s (got {base_s!r}, {cap_s!r})")
        self.component = component
        self._backoff = ExponentialWithJitterBackoff(cap=cap_s, base=base_s)
        self._base_s = base_s
        self.since: float | None = None  # monotonic start of the current outage
        self.failures = 0  # consecutive failed calls
        self.last_error = ""
        self.next_try = 0.0  # monotonic: no call before this while down

    @property
    def down(self) -> bool:
        return self.since is not None

    def down_for(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since

    def due(self) -> bool:
        """True unless a retry now would come before the backoff delay."""
        return self.since is None or time.monotonic() >= self.next_try

    def failed(self, exc: BaseException) -> float:
        now = time.monotonic()
        self.last_error = f"{type(exc).__name__}: {exc}".strip()
        if self.since is None:
            self.since = now
            _log.warning(
                "control: redis unreachable component=%s error=%r", self.component, self.last_error
            )
        self.failures += 1
        # Never below base: full jitter alone can return ~0 and spin on a refused port.
        delay = max(self._base_s, self._backoff.compute(self.failures))
        self.next_try = now + delay
        return delay

    def ok(self) -> float | None:
        """End the outage, if any; returns its length in seconds (None: there was none)."""
        if self.since is None:
            return None
        length = time.monotonic() - self.since
        _log.warning(
            "control: redis reachable again component=%s outage_s=%.2f failed_calls=%d",
            self.component,
            length,
            self.failures,
        )
        self.since, self.failures, self.next_try = None, 0, 0.0
        return length
