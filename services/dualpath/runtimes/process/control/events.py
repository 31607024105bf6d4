"""The run's event history: one Redis stream of msgpack records, shared by all services.

Record schema (version `v` = 1): `v`, `kind` (str), `t` (emulated seconds, from the caller's
clock), `src` (the emitting service) plus any msgpack-able fields of the caller's choosing.
A record is stored as stream field `m` = msgpack.packb(record, use_bin_type=True).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections import deque
from typing import Any

from redis.asyncio import Redis

from dualpath.runtimes.process.control import keys
from dualpath.runtimes.process.control.common import (
    pack,
    raise_if_cancelling,
    require_bytes_client,
    unpack,
)
from dualpath.runtimes.process.control.resilience import REDIS_ERRORS, Outage

SCHEMA = 1
RESERVED = frozenset({"v", "kind", "t", "src"})
PAGE = 5000
BUFFER_MAX = 10_000
_log = logging.getLogger(__name__)


def _check_t(t: float) -> float:
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise ValueError(f"t={t!r} must be a finite number of emulated seconds")
    return float(t)


class EventLog:
    def __init__(self, redis: Redis, run_id: str, src: str, maxlen: int = 1_000_000) -> None:
        if not isinstance(src, str) or not src:
            raise ValueError(f"src={src!r} must be the emitting service's name, e.g. 'prefill0'")
        if isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 1:
            raise ValueError(f"maxlen={maxlen!r} must be an int >= 1 (records kept in Redis)")
        self._r = require_bytes_client(redis)
        self._key = keys.events_key(run_id)
        self.src = src
        self.maxlen = maxlen

    def encode(self, kind: str, t: float, fields: dict[str, Any]) -> bytes:
        """One record as stored; raises ValueError for anything that cannot be stored."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind={kind!r} must be a non-empty str")
        clash = sorted(RESERVED & fields.keys())
        if clash:
            raise ValueError(f"event {kind}: field(s) {clash} are reserved; rename them")
        rec = {"v": SCHEMA, "kind": kind, "t": _check_t(t), "src": self.src, **fields}
        try:
            return pack(rec)
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"event {kind}: fields are not msgpack-able ({e})") from e

    async def emit(self, kind: str, t: float, **fields: Any) -> None:
        """Append one record now (one round trip)."""
        await self.append([self.encode(kind, t, fields)])

    async def append(self, encoded: list[bytes]) -> None:
        """Append already-encoded records, in order, in one MULTI/EXEC round trip.

        All-or-nothing, so a batch whose write failed can be retried without duplicates.
        """
        async with self._r.pipeline(transaction=True) as pipe:
            for m in encoded:
                # approximate trimming lets Redis drop whole nodes: O(1) instead of per-entry
                pipe.xadd(self._key, {"m": m}, maxlen=self.maxlen, approximate=True)
            await pipe.execute()

    async def read_all(self, kinds: set[str] | None = None) -> list[dict[str, Any]]:
        """Every stored record in stream order, optionally only those of `kinds`."""
        out: list[dict[str, Any]] = []
        start: str = "-"
        while True:
            page = await self._r.xrange(self._key, min=start, max="+", count=PAGE) or []
            for entry_id, entry in page:
                rec = self._decode(entry_id, entry)
                if kinds is None or rec["kind"] in kinds:
                    out.append(rec)
            if len(page) < PAGE or page[-1][0] is None:
                return out
            start = _next_id(page[-1][0])

    def _decode(self, entry_id: bytes | str | None, entry: dict[Any, Any] | None) -> dict[str, Any]:
        raw = (entry or {}).get(b"m", (entry or {}).get("m"))
        rec = unpack(raw) if isinstance(raw, bytes) else None
        if not isinstance(rec, dict) or rec.get("v") != SCHEMA:
            got = rec.get("v") if isinstance(rec, dict) else "none"
            raise ValueError(
                f"event {_text(entry_id)} in {self._key} has schema version v={got!r}; this "
                f"build reads v={SCHEMA} only: read it with the dualpath version that wrote "
                "it, or use a fresh run id"
            )
        return rec

    async def count(self) -> int:
        return int(await self._r.xlen(self._key))

    def buffer(self, max_records: int = BUFFER_MAX) -> EventBuffer:
        return EventBuffer(self, max_records)


def _text(v: bytes | str | None) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _next_id(entry_id: bytes | str) -> str:
    """The smallest stream id after `entry_id` (works without the 6.2+ `(` exclusive range)."""
    ms, seq = _text(entry_id).split("-")
    return f"{ms}-{int(seq) + 1}"


class EventBuffer:
    """Batches records of one EventLog into one pipeline per flush, in bounded memory.

    While Redis answers, a full buffer (`max_records`) makes `emit` await a flush: a slow
    Redis applies back-pressure to the emitters and nothing is lost. While it does not (a
    flush failed and its backoff has not elapsed, see `outage`), a full buffer drops its
    oldest record for each new one and counts it in `dropped`: the service keeps running
    and the history gets a gap, reported in the log. A failed flush keeps its records in
    front (the batch is all-or-nothing, so the retry does not duplicate) and returns 0
    instead of raising; a cancelled flush lets its write finish (putting the records back
    could write them twice) and logs them if that write then fails. (So a flush is never
    retried in place, by hand or by a retry library: the next one due retries it, and
    emitters never wait on an unreachable Redis.)
    """

    def __init__(self, log: EventLog, max_records: int = BUFFER_MAX) -> None:
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ValueError(f"max_records={max_records!r} must be an int >= 1")
        self._log = log
        self.max_records = max_records
        self._buf: deque[bytes] = deque()
        self._lock = asyncio.Lock()  # one flush at a time keeps the stream in emit order
        self._task: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[None] | None = None  # write of a cancelled flush
        self.outage = Outage(f"events:{log.src}")
        self.dropped = 0  # records dropped because Redis was unreachable and the buffer full
        self._dropped_at_outage = 0

    def __len__(self) -> int:
        return len(self._buf)

    async def emit(self, kind: str, t: float, **fields: Any) -> None:
        encoded = self._log.encode(kind, t, fields)
        while len(self._buf) >= self.max_records:
            if self.outage.down and not self.outage.due():
                self._drop(len(self._buf) + 1 - self.max_records)
                break
            await self.flush()
        self._buf.append(encoded)

    def _drop(self, n: int) -> None:
        if n <= 0:
            return
        if self.dropped == self._dropped_at_outage:
            _log.warning(
                "events: buffer full while redis unreachable, dropping oldest records "
                "component=%s max_records=%d",
                self.outage.component,
                self.max_records,
            )
        for _ in range(n):
            self._buf.popleft()
        self.dropped += n

    async def flush(self, force: bool = False) -> int:
        """Write every buffered record; returns how many were written (0 when Redis failed
        or, unless `force`, while its backoff runs)."""
        async with self._lock:
            if self._inflight is not None and not self._inflight.done():
                await asyncio.wait({self._inflight})  # keeps the stream in emit order
            if not self._buf or not (force or self.outage.due()):
                return 0
            batch = list(self._buf)
            self._buf.clear()
            write = asyncio.ensure_future(self._log.append(batch))
            self._inflight = write
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                write.add_done_callback(functools.partial(_report_lost, len(batch)))
                raise
            except REDIS_ERRORS as e:
                self._requeue(batch)
                self.outage.failed(e)
                return 0
            except BaseException:
                self._requeue(batch)
                raise
            self._recovered()
            return len(batch)

    def _requeue(self, batch: list[bytes]) -> None:
        self._buf.extendleft(reversed(batch))
        self._drop(len(self._buf) - self.max_records)

    def _recovered(self) -> None:
        if self.outage.ok() is not None and self.dropped > self._dropped_at_outage:
            _log.warning(
                "events: records lost during the redis outage component=%s dropped=%d",
                self.outage.component,
                self.dropped - self._dropped_at_outage,
            )
        self._dropped_at_outage = self.dropped

    async def run_flusher(self, interval_s: float = 0.2) -> None:
        """Flush every `interval_s` until cancelled (Redis errors back off, see `flush`)."""
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s!r} must be > 0")
        while True:
            await asyncio.sleep(interval_s)
            await self.flush()
            raise_if_cancelling()

    def start(self, interval_s: float = 0.2) -> None:
        """Run `run_flusher` in a background task owned by this buffer."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run_flusher(interval_s), name="event-flusher")

    async def close(self) -> None:
        """Stop the background flusher and try once to write what is left; what Redis did
        not take is logged as lost (shutdown must not hang on an unreachable Redis)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        await self.flush(force=True)
        if self._buf:
            _log.warning(
                "events: records not written at close component=%s lost=%d error=%r",
                self.outage.component,
                len(self._buf),
                self.outage.last_error,
            )


def _report_lost(n: int, write: asyncio.Future[None]) -> None:
    exc = None if write.cancelled() else write.exception()
    if exc is not None:
        _log.warning("events: %d records lost: their write failed after a cancel (%s)", n, exc)


async def run_epoch(redis: Redis, run_id: str, candidate: float) -> float:
    """The run's emulated t=0: the first caller's `candidate` wins, everyone gets it back."""
    key = keys.epoch_key(run_id)
    await redis.set(key, repr(_check_t(candidate)), nx=True)
    stored = await redis.get(key)
    if stored is None:
        raise RuntimeError(f"{key} vanished right after SET NX: is something deleting run keys?")
    return float(stored)
