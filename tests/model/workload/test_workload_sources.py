"""Workload sources: the settings keys, `build_workload` for each source, the script types,
and that this code stays importable by the Locust (gevent) process."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from dualpath.model.config.settings import Scenario, build_scenario
from dualpath.model.config.workload_sources import WORKLOAD_SOURCES, build_workload
from dualpath.model.workload import parse_max_len, synthetic_trajectories
from dualpath.model.workload.script import (
    AgentScript,
    ScriptTurn,
    Workload,
    shift_starts,
    synthetic_workload,
)
from tests.paths import MOONCAKE, WEKA


def _sc(**workload: Any) -> Scenario:
    return build_scenario({}, {"workload": workload})


# --- settings ------------------------------------------------------------------------------
def test_defaults_keep_the_synthetic_workload() -> None:
    w = Scenario().workload
    assert (w.source, w.trace, w.replay, w.time_scale) == ("synthetic", None, "session", 1.0)
    assert (w.trace_sessions, w.trace_requests, w.subagents) == (None, None, True)
    assert set(WORKLOAD_SOURCES) == {
        *("synthetic", "synthetic-pooled", "synthetic-short-first", "synthetic-weka"),
        *("weka", "mooncake"),
    }


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"source": "sharegpt"}, "unknown workload source 'sharegpt'; known: synthetic, weka"),
        ({"source": "weka"}, "source=weka needs `trace`"),
        ({"source": "mooncake"}, "source=mooncake needs `trace`"),
        ({"time_scale": 0}, "greater than 0"),
        ({"time_scale": float("inf")}, "finite number"),
        ({"trace_sessions": 0}, "greater than or equal to 1"),
        ({"trace_requests": -1}, "greater than or equal to 1"),
        ({"replay": "closed"}, "'session' or 'open-loop'"),
    ],
)
def test_bad_workload_settings(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _sc(**workload)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DP_WORKLOAD__SOURCE", "mooncake")
    monkeypatch.setenv("DP_WORKLOAD__TRACE", "t.jsonl")
    monkeypatch.setenv("DP_WORKLOAD__REPLAY", "open-loop")
    w = build_scenario({}, {}).workload
    assert (w.source, w.trace, w.replay) == ("mooncake", "t.jsonl", "open-loop")


# --- build_workload ------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "think"), [("offline", 0.0), ("online", 7.5)])
def test_synthetic_source_is_the_table2_generator(mode: str, think: float) -> None:
    sc = build_scenario(
        {}, {"workload": {"mode": mode, "agents": 3}, "online": {"think_time_s": 7.5}}
    )
    w = build_workload(sc)
    trajs = synthetic_trajectories(parse_max_len("64k"), 3, sc.seed)
    assert w == synthetic_workload(trajs, think)
    assert (w.source, w.forks, w.block_tokens) == ("synthetic", (), 0)
    for traj, script in zip(trajs, w.scripts, strict=True):
        assert (script.key, script.start_s) == (f"agent-{traj.agent_id}", 0.0)
        assert [t.prompt for t in script.turns] == list(traj.prompts())
        assert [t.append for t in script.turns] == [u.append for u in traj.turns]
        assert {t.chain for t in script.turns} == {traj.agent_id}
        assert [t.think_s for t in script.turns] == [0.0] + [think] * (len(traj.turns) - 1)
        assert all(t.at_s == 0.0 and t.blocks == () for t in script.turns)
    assert len(build_workload(sc, 5).scripts) == 5


def test_trace_sources_read_their_settings() -> None:
    sc = build_scenario(
        {},
        {
            "workload": {"source": "weka", "trace": str(WEKA), "trace_sessions": 4},
            "engine": {"block_tokens": 32},
        },
    )
    w = build_workload(sc)
    assert w.source == "weka" and len(w.scripts) == 4 and w.block_tokens == 64
    assert len(build_workload(sc, 2).scripts) == 2  # n_agents caps the sessions too
    assert len(build_workload(sc, 9).scripts) == 4
    w64 = build_workload(_sc(source="weka", trace=str(WEKA), trace_sessions=4))
    assert [f.at for f in w.forks] == [2 * f.at for f in w64.forks]  # engine blocks of 32
    parent = build_workload(_sc(source="weka", trace=str(WEKA), trace_sessions=4, subagents=False))
    assert parent.requests < w.requests

    m = build_workload(
        _sc(source="mooncake", trace=str(MOONCAKE), trace_requests=50, time_scale=0.1)
    )
    assert m.requests == 50 and m.block_tokens == 512
    assert m.scripts[-1].start_s == pytest.approx(m.scripts[-1].turns[0].at_s)
    assert "first 50 in arrival order" in m.description and "time x0.1" in m.description


# --- script types --------------------------------------------------------------------------
def _turn(**kw: Any) -> ScriptTurn:
    args: dict[str, Any] = {
        "prompt": 10,
        "gen": 1,
        "think_s": 0.0,
        "at_s": 0.0,
        "chain": 0,
        "append": 10,
    }
    return ScriptTurn(**(args | kw))


@pytest.mark.parametrize(
    "bad",
    [
        {"prompt": 0},
        {"gen": 0},
        {"append": 0},
        {"think_s": -1.0},
        {"at_s": float("nan")},
        {"chain": -1},
    ],
)
def test_script_turns_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="ScriptTurn"):
        _turn(**bad)


def test_scripts_and_workloads_are_checked() -> None:
    with pytest.raises(ValueError, match="AgentScript"):
        AgentScript("a", 0.0, ())
    with pytest.raises(ValueError, match="AgentScript"):
        AgentScript("", 0.0, (_turn(),))
    s = AgentScript("a", 0.0, (_turn(),))
    with pytest.raises(ValueError, match="unique"):
        Workload("x", (s, s), (), 0, "")


def test_shift_starts_moves_sessions_and_their_arrivals() -> None:
    s = AgentScript("a", 0.0, (_turn(), _turn(at_s=5.0, think_s=1.0)))
    w = shift_starts(Workload("x", (s,), (), 0, "d"), [100.0])
    assert w.scripts[0].start_s == 100.0
    assert [t.at_s for t in w.scripts[0].turns] == [100.0, 105.0]
    assert w.scripts[0].turns[1].think_s == 1.0
    with pytest.raises(ValueError, match="need 1 starts"):
        shift_starts(w, [])


def test_workload_code_imports_no_async_stack() -> None:
    """Locust monkey-patches on import: the workload code it shares must not pull in
    asyncio, aiohttp or grpc (docs/loadgen.md, Process boundaries)."""
    code = (
        "import sys\n"
        "import dualpath.model.config.workload_sources, dualpath.model.workload.traces\n"
        "import dualpath.model.workload.script\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'asyncio', 'aiohttp', 'grpc'})\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_trace_turns_keeps_each_sessions_first_turns() -> None:
    from dualpath.model.config.presets import resolve
    from dualpath.model.config.workload_sources import build_workload

    sets = ["workload.source=weka", f"workload.trace={WEKA}", "workload.trace_sessions=2"]
    whole = build_workload(resolve("smoke", {}, sets))
    cut = build_workload(resolve("smoke", {}, [*sets, "workload.trace_turns=3"]))
    assert [s.turns for s in cut.scripts] == [s.turns[:3] for s in whole.scripts]
    assert "first 3 turns each (6 requests)" in cut.description
