"""`RequestLog`: finished turns kept by column read back as the records that went in."""

from __future__ import annotations

import math

import pytest

from dualpath.model.entities.metrics import Metrics, RequestLog, RequestRecord
from dualpath.model.entities.record import RECORD_NAMES


def _record(i: int, path: str = "pe") -> RequestRecord:
    return RequestRecord(
        session=i * 7919,  # above the small-int cache, and a session id as large as 48P96D's
        turn=i,
        prompt=65_000 + i,
        hit=64 * i,
        gen=1 + i % 3,
        path=path,
        arrival=0.1 * i,
        t_first=math.pi * i,
        t_second=math.pi * i + 1e-9,
        t_last=1e6 + i / 3,
        wait_pe_s=-1.0,
        forward_s=0.0 if i % 2 else 1 / 7,
    )


def test_rows_read_back_equal_and_in_order() -> None:
    recs = [_record(i, ("pe", "de", "split")[i % 3]) for i in range(50)]
    log = RequestLog(recs)
    assert len(log) == 50 and list(log) == recs  # every float and int exactly
    assert log[0] == recs[0] and log[-1] == recs[-1] and log[7] == recs[7]
    assert log[45:] == recs[45:] and log[-3:] == recs[-3:] and log[::10] == recs[::10]
    assert recs[3] in log and _record(99) not in log
    with pytest.raises(IndexError):
        log[50]


def test_every_field_lands_in_its_own_column() -> None:
    """All fields distinct, so a column written in the wrong order cannot pass."""
    names = list(RECORD_NAMES)
    ints = {"session", "turn", "prompt", "hit", "gen"}
    values: dict[str, object] = {
        n: (i + 1000 if n in ints else i + 0.5) for i, n in enumerate(names)
    }
    values["path"] = "de"
    rec = RequestRecord(**values)  # type: ignore[arg-type]
    log = RequestLog([rec])
    assert log[0] == rec and list(log) == [rec]
    assert list(log.rows()) == [tuple(values[n] for n in names)] == [rec.astuple()]
    assert RequestRecord(*rec.astuple()) == rec
    # the positional order is RECORD_NAMES' (the columns and the process runtime's rows)
    assert RequestRecord(*(values[n] for n in names)) == rec  # type: ignore[arg-type]
    for n in names:
        if n != "path":
            assert log.column(n)[0] == values[n], n


def test_a_column_is_the_field_of_every_row() -> None:
    log = RequestLog(_record(i) for i in range(5))
    assert list(log.column("t_first")) == [math.pi * i for i in range(5)]
    assert list(log.column("session")) == [i * 7919 for i in range(5)]
    with pytest.raises(KeyError, match="path"):
        log.column("path")


def test_metrics_keep_the_run_s_records_in_a_log() -> None:
    m = Metrics()
    m.requests.append(_record(1))
    assert isinstance(m.requests, RequestLog) and list(m.requests) == [_record(1)]


def test_rows_pending_in_a_batch_are_read_too() -> None:
    """Rows join the columns in batches: reads in between see every row, in order."""
    recs = [_record(i, ("pe", "de")[i % 2]) for i in range(2500)]
    log = RequestLog()
    for r in recs[:1500]:
        log.append(r)
    assert len(log) == 1500 and log[-1] == recs[1499]
    for r in recs[1500:]:
        log.append(r)
    assert len(log) == 2500 and list(log) == recs
    assert list(log.column("turn")) == list(range(2500))


def test_a_finished_request_becomes_its_row() -> None:
    """`Metrics.finish` writes the row straight from the request: each stage is the span
    between two stamps, -1.0 where a stamp is missing, every value in its own column."""
    from dualpath.model.entities.request import ReadPath, Request

    stamped = Request(rid=1, session=90_001, turn=3, prompt=70_000, gen=5, arrival=0.25)
    stamped.hit, stamped.path = 64_000, ReadPath.DE
    times = ("t_pe", "t_de", "t_read_start", "t_read_done", "t_first", "t_handed",
             "t_in_hbm", "t_joined", "t_second", "t_last")  # fmt: skip
    at = {name: 0.25 + math.sqrt(k + 1) for k, name in enumerate(times)}
    for name, t in at.items():
        setattr(stamped, name, t)
    stamped.forward_s, stamped.load_wait_s = 0.7, 0.1
    bare = Request(rid=2, session=5, turn=0, prompt=900, gen=1, arrival=1.5)
    bare.t_first = bare.t_second = bare.t_last = 2.0
    m = Metrics()
    for req in (stamped, bare):
        m.finish(req)
    assert list(m.requests) == [
        RequestRecord(
            session=90_001, turn=3, prompt=70_000, hit=64_000, gen=5, path="de", arrival=0.25,
            t_first=at["t_first"], t_second=at["t_second"], t_last=at["t_last"],
            wait_pe_s=at["t_pe"] - 0.25,
            wait_de_s=at["t_de"] - at["t_pe"],
            buffer_wait_s=at["t_read_start"] - at["t_de"],
            read_s=at["t_read_done"] - at["t_read_start"],
            forward_s=0.7, load_wait_s=0.1,
            handover_s=at["t_handed"] - at["t_first"],
            h2d_s=at["t_in_hbm"] - at["t_handed"],
            join_wait_s=at["t_joined"] - at["t_in_hbm"],
        ),
        RequestRecord(
            session=5, turn=0, prompt=900, hit=0, gen=1, path="pe", arrival=1.5,
            t_first=2.0, t_second=2.0, t_last=2.0,
        ),  # every stage unstamped: -1.0, forward 0.0 (the record's defaults)
    ]  # fmt: skip


def test_a_record_compares_by_value_like_a_dataclass() -> None:
    a, b = _record(3), _record(3)
    assert a == b and a is not b and a != _record(4)
    b.t_last += 1e-9
    assert a != b and a != a.astuple()  # another type is never equal
    with pytest.raises(TypeError):
        hash(a)
    assert repr(_record(1)).startswith("RequestRecord(session=7919, turn=1, prompt=65001,")
