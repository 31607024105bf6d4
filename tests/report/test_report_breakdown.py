"""Per-turn TTFT breakdown (report/breakdown.py) and the JCT floor (report/floor.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dualpath.model.config.presets import resolve
from dualpath.model.entities.metrics import RequestLog, RequestRecord
from dualpath.model.roofline import Roofline, load_gpu, load_model
from dualpath.model.workload.script import ScriptTurn
from dualpath.report.breakdown import (
    STAGES,
    SUB_STAGES,
    TTST_STAGES,
    ttft_breakdown,
    ttst_breakdown,
)
from dualpath.report.floor import FLOOR_TOLERANCE, FloorModel
from dualpath.report.plots import breakdown_png_name, write_png
from dualpath.report.render import markdown_report
from dualpath.runtimes.virtual.sim import simulate


def _rec(path: str = "de", forward_s: float = 0.3, **kw: Any) -> RequestRecord:
    # arrival 10, first token 11.5: queue 0.1+0.2, buffer 0.05, read 0.4, then 0.75 left
    fields: dict[str, Any] = {
        "session": 1, "turn": 0, "prompt": 1000, "hit": 900, "gen": 8, "path": path,
        "arrival": 10.0, "t_first": 11.5, "t_second": 11.52, "t_last": 11.7,
        "wait_pe_s": 0.1, "wait_de_s": 0.2, "buffer_wait_s": 0.05, "read_s": 0.4,
        "forward_s": forward_s, "load_wait_s": 0.1,
    }  # fmt: skip
    return RequestRecord(**{**fields, **kw})


def _stages(b: dict[str, Any]) -> dict[str, float]:
    return {k: v["mean"] for k, v in b["stages"].items()}


def test_stages_add_up_to_the_ttft() -> None:
    b = ttft_breakdown([_rec()])
    st = _stages(b)
    assert b["n"] == 1 and tuple(st) == (*STAGES, *SUB_STAGES)
    assert sum(st[k] for k in STAGES) == pytest.approx(1.5) == pytest.approx(b["ttft_s"]["mean"])
    assert st["queue"] == pytest.approx(st["queue_pe"] + st["queue_de"]) == pytest.approx(0.3)
    assert st["prefill_wait"] == pytest.approx(0.45)  # 0.75 after the read - 0.3 of forwards
    assert (st["transfer"], st["prefill"]) == pytest.approx((0.1, 0.2))


def test_a_request_log_breaks_down_exactly_as_its_records() -> None:
    """The run's own log is read by column, any other records one by one: equal floats."""
    recs = [
        _rec(("de", "pe", "split")[i % 3], forward_s=0.3 * (i % 4) / 3, read_s=0.1 + i / 7,
             wait_pe_s=(-1.0 if i == 5 else 0.1 * i), gen=1 + i % 3, handover_s=0.004 * i,
             h2d_s=(-1.0 if i == 7 else 0.006), join_wait_s=0.003, t_second=11.5 + i / 100)
        for i in range(40)
    ]  # fmt: skip
    log = RequestLog(recs)
    assert ttft_breakdown(log) == ttft_breakdown(recs)
    assert ttst_breakdown(log) == ttst_breakdown(recs)
    assert ttft_breakdown(log)["n"] == 39 and not ttft_breakdown(log)["split_measured"]


def test_unmeasured_stages() -> None:
    """Old ten-field rows (no stage fields) are skipped; rows without forward times (the
    process runtime) keep the time after the read as one `prefill` stage."""
    assert ttft_breakdown([RequestRecord(1, 0, 1000, 900, 8, "pe", 0.0, 1.0, 1.1, 1.2)])["n"] == 0
    b = ttft_breakdown([_rec(forward_s=0.0), _rec(forward_s=0.0)])
    assert b["n"] == 2 and not b["split_measured"]
    assert b["stages"]["prefill"]["mean"] == pytest.approx(0.75)
    assert b["stages"]["transfer"]["mean"] is None and b["share"]["prefill_wait"] is None
    json.dumps(b, allow_nan=False)  # no NaN reaches the JSON


def test_breakdown_means_shares_and_paths() -> None:
    recs = [_rec("de"), _rec("pe", read_s=0.2), _rec("de", wait_pe_s=0.5)]
    b = ttft_breakdown(recs)
    assert b["n"] == 3 and b["split_measured"]
    means = sum(b["stages"][k]["mean"] for k in STAGES)
    assert means == pytest.approx(b["ttft_s"]["mean"])
    assert sum(b["share"].values()) == pytest.approx(1.0)
    assert {p: v["n"] for p, v in b["by_path"].items()} == {"de": 2, "pe": 1}
    assert b["by_path"]["pe"]["mean"]["read"] == pytest.approx(0.2)
    assert b["stages"]["queue"]["p99"] >= b["stages"]["queue"]["p50"]


def _ttst_rec(path: str = "de", gen: int = 8, **kw: float) -> RequestRecord:
    # first token 11.5, second 11.52: handover 0.004, h2d 0.006, join 0.003, step 0.007
    stamps = {"handover_s": 0.004, "h2d_s": 0.006, "join_wait_s": 0.003, **kw}
    return _rec(path, gen=gen, **stamps)


def test_ttst_stages_add_up_to_the_ttst() -> None:
    st = _stages(ttst_breakdown([_ttst_rec()]))
    assert tuple(st) == TTST_STAGES
    assert sum(st.values()) == pytest.approx(0.02)
    assert st["first_step"] == pytest.approx(0.007)


def test_ttst_breakdown_skips_one_token_turns_and_unstamped_rows() -> None:
    """A one-token turn has no second token; a row written before the stamps has -1s."""
    assert ttst_breakdown([_ttst_rec(gen=1)])["n"] == 0
    assert ttst_breakdown([_rec()])["n"] == 0  # h2d_s etc. at their -1.0 defaults
    recs = [_ttst_rec("de"), _ttst_rec("pe", h2d_s=0.010), _ttst_rec(gen=1), _rec()]
    b = ttst_breakdown(recs)
    assert b["n"] == 2 and b["ttst_s"]["mean"] == pytest.approx(0.02)
    assert sum(b["stages"][k]["mean"] for k in TTST_STAGES) == pytest.approx(0.02)
    assert sum(b["share"].values()) == pytest.approx(1.0)
    assert b["by_path"]["pe"]["mean"]["h2d"] == pytest.approx(0.010)
    assert b["by_path"]["pe"]["mean"]["first_step"] == pytest.approx(0.003)
    json.dumps(ttst_breakdown([]), allow_nan=False)


# --- the floor's closed forms against the roofline, step by step -------------------------
@pytest.mark.parametrize("model", ["deepseek-v3.2", "qwen2.5-32b", "ds-27b"])
def test_decode_floor_is_the_sum_of_single_request_steps(model: str) -> None:
    m, g = load_model(model), load_gpu("h800")
    pe, de = Roofline(m, g, 16), Roofline(m, g, 32)
    for cnic in (50e9, 1e6):  # a slow CNIC makes the all-to-all the step for some steps
        fm = FloorModel(pe, de, 64, cnic, 8)
        a2a = de.a2a_rdma_bytes_per_layer(1, 8) * de.moe_layers / cnic
        for prompt, gen in ((100, 1), (900, 40), (2000, 300), (60_000, 50)):
            turn = ScriptTurn(prompt, gen, 0.0, 0.0, 1, 64)
            direct = sum(
                max(de.decode_step_time(1, prompt + k, de.attended(prompt + k)), a2a)
                for k in range(gen - 1)
            )
            assert fm.decode_s(turn) == pytest.approx(direct, rel=1e-9, abs=1e-12)


def test_prefill_floor_uses_the_sessions_own_hit() -> None:
    m, g = load_model("deepseek-v3.2"), load_gpu("h800")
    pe = Roofline(m, g, 16)
    fm = FloorModel(pe, Roofline(m, g, 32), 64, 50e9, 8)
    first = ScriptTurn(5000, 10, 0.0, 0.0, 1, 5000)
    later = ScriptTurn(5000 + 10 + 300, 10, 0.0, 0.0, 1, 300)  # context 5010: 78 full blocks
    assert fm.hit(first) == 0 and fm.hit(later) == 78 * 64
    assert fm.prefill_s(later) >= pe.prefill_time([(78 * 64, later.prompt - 78 * 64)])
    assert fm.prefill_s(first) > fm.prefill_s(later)


# --- end to end on the smoke preset ----------------------------------------------------------
def _report(*sets: str) -> dict[str, Any]:
    return simulate(resolve("smoke", {}, list(sets)))


def test_offline_report_has_floor_and_breakdown(tmp_path: Path) -> None:
    r = _report("workload.agents=4")
    floor = r["jct_floor_s"]
    assert 0 < floor <= r["jct_s"]
    assert r["jct_floor_bound"] == (r["jct_s"] <= floor * (1 + FLOOR_TOLERANCE))
    f = r["jct_floor"]
    assert f["prefill_s"] + f["decode_s"] + f["think_s"] == pytest.approx(floor)
    assert f["per_agent_s"]["max"] == pytest.approx(floor)
    last = f["last_agent"]  # its chain is the JCT: TTFTs + decodes + the rest
    assert last["run_s"] == pytest.approx(r["jct_s"])
    assert last["ttft_s"] + last["decode_s"] + last["other_s"] == pytest.approx(last["run_s"])
    assert last["floor_s"] <= last["run_s"] and last["decode_over_floor"] >= 1
    b = r["ttft_breakdown"]
    assert b["n"] == r["requests"]["completed"] and b["split_measured"]
    assert sum(b["stages"][k]["mean"] for k in STAGES) == pytest.approx(
        r["latency"]["ttft_s"]["mean"], rel=1e-9
    )
    assert all(b["stages"][k]["mean"] >= -1e-12 for k in STAGES)
    t = r["ttst_breakdown"]  # every turn of the smoke preset generates two or more tokens
    assert t["n"] == r["latency"]["ttst_s"]["n"] > 0
    assert sum(t["stages"][k]["mean"] for k in TTST_STAGES) == pytest.approx(
        r["latency"]["ttst_s"]["mean"], rel=1e-9
    )
    assert all(t["stages"][k]["p50"] >= 0 for k in TTST_STAGES)
    # a running chunk is cut at its next step boundary: the join wait is under one step
    assert t["stages"]["join_wait"]["p99"] <= t["stages"]["first_step"]["p99"]
    json.dumps(r, allow_nan=False)
    md = markdown_report(r, "run.png")
    assert "## TTST breakdown per turn" in md
    assert "## TTFT breakdown per turn" in md and "JCT floor" in md and "run-ttft.png" in md
    write_png(r, tmp_path / "run.png")
    assert (tmp_path / breakdown_png_name("run.png")).stat().st_size > 0


def test_a_lone_agent_runs_close_to_its_floor() -> None:
    """One agent on an idle cluster: what the floor leaves out (reads, transfers,
    scheduling) is small next to compute, so the JCT is within a few tens of % of it."""
    r = _report("workload.agents=1")
    assert r["jct_floor_s"] <= r["jct_s"] <= 1.3 * r["jct_floor_s"]
    assert r["jct_floor"]["agent"] == "agent-0"


def test_online_reports_have_the_breakdown_but_no_floor() -> None:
    r = _report("workload.mode=online", "online.aps=0.5", "online.max_duration_s=30")
    assert "jct_floor_s" not in r and r["ttft_breakdown"]["n"] > 0
    assert not math.isnan(r["ttft_breakdown"]["ttft_s"]["mean"])


def test_the_snic_panel_stays_readable_at_paper_scale(tmp_path: Path) -> None:
    """144 nodes (48P96D): no legend entry per node (it cannot fit: matplotlib warned that
    the layout failed), but every node drawn, with their mean and the busiest node."""
    import warnings

    from dualpath.report.plots import LEGEND_NODES, _snic_panel

    r = _report("workload.agents=1")
    r["snic"]["series_gbps"] = {f"node{k}": [k * 0.01, 1.0, 0.5][: 1 + k % 3] for k in range(144)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the tight-layout warning fails the test
        write_png(r, tmp_path / "big.png")
    assert (tmp_path / "big.png").stat().st_size > 0

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    _snic_panel(ax, r["snic"]["series_gbps"], 30.0)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["each of 144 nodes", "mean over nodes", "busiest node"]
    assert len(ax.lines) == 144 + 3
    few = {f"node{k}": [1.0, 2.0] for k in range(LEGEND_NODES)}
    fig2, ax2 = plt.subplots()
    _snic_panel(ax2, few, 30.0)
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == list(few)
    plt.close(fig)
    plt.close(fig2)
