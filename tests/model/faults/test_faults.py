"""The fault schedule (parse, targets), degrade on virtual time at exact emulated times,
and the nemesis checker."""

from __future__ import annotations

import pytest

from dualpath.model.config.presets import ConfigError, resolve
from dualpath.model.faults import Fault, FaultError, check_targets, parse, parse_all
from dualpath.model.faults.checker import ClientRecord, check
from dualpath.model.faults.spec import virtual_faults_only
from dualpath.runtimes.virtual.sim import simulate


def test_parse_every_kind() -> None:
    assert parse("kill:decode0@10+5") == Fault("kill", "decode0", 10.0, 5.0)
    assert parse("kill:decode0@10").end_s == float("inf")
    assert parse("pause:prefill0@5+2") == Fault("pause", "prefill0", 5.0, 2.0)
    assert parse("degrade:prefill0.snic=40@0+300") == Fault(
        "degrade", "prefill0", 0.0, 300.0, "snic", 40.0
    )
    assert parse("redis-drop@20+3") == Fault("redis-drop", "", 20.0, 3.0)
    assert [str(f) for f in parse_all(["pause:decode0@9+1", "kill:decode0@1+2"])] == [
        "kill:decode0@1+2",
        "pause:decode0@9+1",
    ]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("kil:decode0@1", "unknown kind"),
        ("kill@1+2", "needs a target"),
        ("kill:decode0", "expected KIND"),
        ("kill:decode0@-1", "AT '-1'"),
        ("kill:decode0@nan", "AT 'nan'"),
        ("kill:decode0@1+inf", "FOR 'inf'"),
        ("pause:decode0@1", "pause needs a duration"),
        ("redis-drop:x@1+2", "takes no target"),
        ("redis-drop@1", "needs a duration"),
        ("degrade:prefill0@1+2", "degrade needs TARGET.LINK=GBPS"),
        ("degrade:prefill0.dram=5@1+2", "degrade needs TARGET.LINK=GBPS"),
        ("degrade:prefill0.snic=0@1+2", "GBPS must be > 0"),
        ("kill:decode0.snic=3@1", "only degrade"),
    ],
)
def test_bad_faults_say_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(FaultError, match=says):
        parse(spec)


def test_targets_must_exist_in_the_topology() -> None:
    check_targets(parse_all(["kill:storage@1+1", "degrade:decode0.cnic=5@1"]), ["decode0"])
    with pytest.raises(FaultError, match="no node 'decode3'"):
        check_targets([parse("degrade:decode3.snic=5@1")], ["decode0"])
    with pytest.raises(ConfigError, match=r"faults.schedule: .*no service 'prefill7'"):
        resolve("smoke", {}, ['faults.schedule=["kill:prefill7@1+1"]'])


def test_virtual_time_takes_link_faults_only() -> None:
    virtual_faults_only(["degrade:prefill0.snic=5@0+10"])
    with pytest.raises(FaultError, match="needs the process runtime"):
        virtual_faults_only(["pause:prefill0@1+1"])


def test_a_degraded_pe_snic_costs_basic_time_and_dualpath_reads_around_it() -> None:
    """The degraded-SNIC scenario: prefill0's storage NIC at 2 Gbps (of 400) for 60 s. Basic
    reads only through PE SNICs; DualPath's read queues send the reads to the DE side."""
    spec = "degrade:prefill0.snic=2@0.5+60"

    def jct(policy: str, *faults: str) -> dict[str, object]:
        sc = resolve(
            "smoke", {"policy": {"name": policy}, "faults": {"schedule": list(faults)}}, []
        )
        return simulate(sc)

    slow = jct("basic", spec)
    assert slow["faults"]["events"] == [
        {"fault": spec, "event": "applied", "t_s": 0.5},
        {"fault": spec, "event": "cleared", "t_s": 60.5},
    ]
    basic_cost = slow["jct_s"] / jct("basic")["jct_s"]  # type: ignore[operator]
    dual_cost = jct("dualpath", spec)["jct_s"] / jct("dualpath")["jct_s"]  # type: ignore[operator]
    assert basic_cost > 1.2 and dual_cost < 1.1  # measured: 1.37 and 1.015


def _rec(session: str, seq: int, status: int, rid: int | None) -> ClientRecord:
    return ClientRecord(session, seq, status, rid)


def _done(rid: int, session: int, turn: int, t: float) -> dict[str, object]:
    return {"kind": "turn_done", "rid": rid, "session": session, "turn": turn, "t": t}


def test_checker_passes_a_clean_history_and_counts_explicit_failures() -> None:
    records = [_rec("a", 0, 200, 1), _rec("a", 1, 503, None), _rec("a", 2, 200, 3)]
    v = check(records, [_done(1, 7, 0, 1.0), _done(3, 7, 2, 2.0)], {})
    assert v.ok and (v.completed, v.failed_explicitly) == (2, 1)


@pytest.mark.parametrize(
    ("records", "history", "integrity", "field"),
    [
        ([_rec("a", 0, 0, None)], [], {}, "lost"),  # no answer
        ([_rec("a", 0, 200, 1)], [], {}, "lost"),  # told ok, never completed
        ([_rec("a", 0, 200, 1)], [_done(1, 7, 0, 1.0)] * 2, {}, "duplicated"),
        ([_rec("a", 0, 503, None)], [_done(1, 7, 0, 1.0)], {}, "duplicated"),
        (
            [_rec("a", 0, 200, 1), _rec("a", 1, 200, 2)],
            [_done(1, 7, 1, 1.0), _done(2, 7, 0, 2.0)],
            {},
            "out_of_order",
        ),
        ([], [], {"blocks_corrupted": 1}, "blocks_corrupted"),
    ],
)
def test_checker_catches_each_violation(
    records: list[ClientRecord], history: list[dict[str, object]], integrity: dict[str, int],
    field: str,
) -> None:  # fmt: skip
    v = check(records, history, integrity)
    assert not v.ok and v.summary()[field]
