"""What the engines record during a run; the report is computed from this afterwards."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from struct import pack
from typing import Any, Final, overload

from dualpath.model.entities.record import RECORD_FIELDS, RECORD_NAMES, RequestRecord
from dualpath.model.entities.request import ReadPath, Request, path_value
from dualpath.model.entities.steps import EngineSteps

__all__ = ["TIER_LEVELS", "Integrity", "Metrics", "RequestLog", "RequestRecord", "TierStats"]


class RequestLog:
    """Every finished turn's `RequestRecord`, kept by column: 8 bytes a field instead of an
    object with its boxed numbers (≈ 600 bytes a turn), so 48P96D's 5.2 M turns fit in a
    few GB and the garbage collector does not walk millions of records. Reading a row
    builds its record (the same values: a float or an int round-trips exactly). A
    `Collection` of records (not a `Sequence`: a compiled class cannot subclass an ABC), with
    int and slice indexing."""

    __slots__ = ("_cols", "_path", "_path_ids", "_paths", "_pending")

    def __init__(self, records: Iterable[RequestRecord] = ()) -> None:
        self._cols: list[array[Any]] = [
            array("d" if is_float else "q") for name, is_float in RECORD_FIELDS if name != "path"
        ]
        self._path: array[int] = array("B")  # index into _paths
        self._paths: list[str] = []
        self._path_ids: dict[str, int] = {}
        self._pending: list[tuple[Any, ...]] = []  # rows not yet in the columns
        for r in records:
            self.append(r)

    def append(self, r: RequestRecord) -> None:
        # A row waits as one tuple and joins the columns in batches: one `extend` per
        # column per batch, where an `append` per field cost ≈ 3.7 µs a turn compiled. The
        # order is the columns' (`_FIELDS` without `path`), then `path` (a test checks it).
        self._pending.append(
            (
                r.session, r.turn, r.prompt, r.hit, r.gen,
                r.arrival, r.t_first, r.t_second, r.t_last,
                r.wait_pe_s, r.wait_de_s, r.buffer_wait_s, r.read_s, r.forward_s,
                r.load_wait_s, r.handover_s, r.h2d_s, r.join_wait_s, r.path,
            )
        )  # fmt: skip
        if len(self._pending) >= _BATCH:
            self._flush()

    def append_request(self, req: Request) -> None:
        """A finished turn's row, straight from the request: its `RequestRecord` is never
        built (a dataclass's generated `__init__` runs interpreted even in a compiled build).
        The order is `append`'s; the stages are spans between the request's stamps."""
        self._pending.append(
            (
                req.session, req.turn, req.prompt, req.hit, req.gen,
                req.arrival, req.t_first, req.t_second, req.t_last,
                _span(req.arrival, req.t_pe),
                _span(req.t_pe, req.t_de),
                _span(req.t_de, req.t_read_start),
                _span(req.t_read_start, req.t_read_done),
                req.forward_s,
                req.load_wait_s,
                _span(req.t_first, req.t_handed),
                _span(req.t_handed, req.t_in_hbm),
                _span(req.t_in_hbm, req.t_joined),
                path_value(req.path),
            )
        )  # fmt: skip
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        rows = self._pending
        if not rows:
            return
        self._pending = []
        values = list(zip(*rows, strict=True))
        cols = self._cols
        n = str(len(rows))
        for k in range(len(cols)):
            col = cols[k]
            # Packed by `struct` and copied in: the same 8 bytes a value as `extend`, whose
            # per-item store parses each value like a call's argument (≈ 6x slower).
            col.frombytes(pack(n + col.typecode, *values[k]))
        self._path.extend([self._code(p) for p in values[len(cols)]])

    def _code(self, path: str) -> int:
        code = self._path_ids.get(path)
        if code is None:
            code = self._path_ids[path] = len(self._paths)
            self._paths.append(path)
        return code

    def __len__(self) -> int:
        return len(self._path) + len(self._pending)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[RequestRecord]: ...
    def __getitem__(self, i: int | slice) -> RequestRecord | list[RequestRecord]:
        self._flush()
        if isinstance(i, slice):
            return [self._row(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("request record index out of range")
        return self._row(i % n)

    def column(self, name: str) -> array[int] | array[float]:
        """One field of every row, as stored (`d` floats, `q` ints): for numpy without a
        record per row (`np.asarray(log.column("t_first"))`). Not `path`."""
        self._flush()
        try:
            return self._cols[_COLUMN[name]]
        except KeyError:
            raise KeyError(f"no numeric request field {name!r}") from None

    def path_codes(self) -> tuple[array[int], list[str]]:
        """Every row's read path as a code (`B`), and the paths the codes index."""
        self._flush()
        return self._path, list(self._paths)

    def __contains__(self, record: object) -> bool:
        return any(r == record for r in self)

    def __iter__(self) -> Iterator[RequestRecord]:
        # Each record built by a direct call, no row list: a report reads every row six times.
        self._flush()
        paths = self._paths
        rows = zip(self._path, *self._cols)  # noqa: B905 - equal lengths, and read often
        for code, s, t, p, h, g, a, f1, f2, fl, w1, w2, bw, rd, fw, lw, ho, hd, jw in rows:
            yield RequestRecord(
                s, t, p, h, g, paths[code], a, f1, f2, fl, w1, w2, bw, rd, fw, lw, ho, hd, jw
            )

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Every row as a tuple in `RequestRecord`'s positional order (no record built)."""
        for r in self:
            yield r.astuple()

    def _row(self, k: int) -> RequestRecord:
        row: list[Any] = [col[k] for col in self._cols]
        row.insert(_PATH_AT, self._paths[self._path[k]])
        return RequestRecord(*row)


_PATH_AT: Final = RECORD_NAMES.index("path")
_BATCH: Final = 1024  # rows kept as tuples before they join the columns
_COLUMN = {name: i for i, name in enumerate(n for n in RECORD_NAMES if n != "path")}


@dataclass(slots=True)
class Integrity:
    blocks_read: int = 0
    blocks_persisted: int = 0
    blocks_lost: int = 0
    blocks_corrupted: int = 0
    bytes_from_storage: float = 0.0
    bytes_to_prefill_hbm: float = 0.0  # hit KV loaded into PE HBM, first chunk, both paths
    bytes_reloaded: float = 0.0  # cached KV loaded again for later chunks of a request
    bytes_persisted: float = 0.0


TIER_LEVELS = ("hbm", "local_dram", "remote_dram", "storage")


@dataclass(slots=True)
class TierStats:
    """Where each hit token came from, with the DRAM tier on (docs/tier.md). `hbm` stays 0:
    no KV is kept in HBM between turns, so every hit is read from DRAM or storage."""

    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_LEVELS, 0))
    bytes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIER_LEVELS, 0.0))

    def add(self, level: str, tokens: int, nbytes: float) -> None:
        self.tokens[level] += tokens
        self.bytes[level] += nbytes


class BusyClock:
    """One engine's busy seconds, kept by the engine's own loop: a decode unit's per-GPU
    batch is one (it adds a chunk's step time times its steps). A native double in a
    compiled build, where a dict entry was a boxed float made anew at every chunk, read
    through a hashed lookup of a dict shared by every engine of the cluster."""

    __slots__ = ("busy_seconds",)

    def __init__(self) -> None:
        self.busy_seconds = 0.0


@dataclass(slots=True)
class Metrics:
    """Append-only run record. Times are emulated seconds."""

    requests: RequestLog = field(default_factory=RequestLog)
    failed: int = 0
    read_path: dict[str, int] = field(default_factory=lambda: {"pe": 0, "de": 0})
    bytes_by_path: dict[str, float] = field(default_factory=lambda: {"pe": 0.0, "de": 0.0})
    integrity: Integrity = field(default_factory=Integrity)
    # engine_id -> busy seconds (roofline compute time of its own batches), added per
    # batch; an engine that keeps its own `BusyClock` is in `busy_clocks` instead. Read
    # both through `busy_of` / `busy_totals`.
    busy_s: dict[str, float] = field(default_factory=dict)
    busy_clocks: dict[str, BusyClock] = field(default_factory=dict)
    # (time, max/avg attention time across the GPUs of one lockstep unit) per forward
    attention_balance: list[tuple[float, float]] = field(default_factory=list)
    forwards: int = 0
    decode_chunks: int = 0
    end_time: float = 0.0
    # engine_id -> its steps in vLLM's histogram shapes (exported by the process runtime)
    steps: dict[str, EngineSteps] = field(default_factory=dict)
    tier: TierStats | None = None  # set when the DRAM tier is on

    def add_busy(self, engine_id: str, seconds: float) -> None:
        self.busy_s[engine_id] = self.busy_s.get(engine_id, 0.0) + seconds

    def keep_busy(self, engine_id: str, clock: BusyClock) -> None:
        """`clock` keeps `engine_id`'s busy seconds from now on (its engine adds to it).

        A later clock for the same engine takes over from the earlier one, with its seconds:
        a decode service builds the cluster's units, then its own serving unit for its
        engines, and the one built last is the one that runs."""
        old = self.busy_clocks.get(engine_id)
        if old is not None and old is not clock:
            clock.busy_seconds += old.busy_seconds
            old.busy_seconds = 0.0
        self.busy_clocks[engine_id] = clock

    def busy_of(self, engine_id: str) -> float:
        """Busy seconds of one engine so far."""
        clock = self.busy_clocks.get(engine_id)
        added = self.busy_s.get(engine_id)
        if clock is None:
            return 0.0 if added is None else added
        # (one of the two is 0.0 in any one process: the value is then exact)
        return clock.busy_seconds if added is None else added + clock.busy_seconds

    def busy_totals(self) -> dict[str, float]:
        """Busy seconds of every engine that has any, by engine id."""
        out = dict(self.busy_s)
        for engine_id in self.busy_clocks:
            out[engine_id] = self.busy_of(engine_id)
        return out

    def steps_of(self, engine_id: str) -> EngineSteps:
        got = self.steps.get(engine_id)
        if got is None:
            got = self.steps[engine_id] = EngineSteps()
        return got

    def record_path(self, path: ReadPath, nbytes: float) -> None:
        value = path_value(path)
        self.read_path[value] += 1
        self.bytes_by_path[value] += nbytes

    def finish(self, req: Request) -> None:
        self.requests.append_request(req)


def _span(start: float, end: float) -> float:
    """end - start, or -1.0 when either was never stamped (-1.0 on the Request)."""
    return end - start if start >= 0 and end >= 0 else -1.0
