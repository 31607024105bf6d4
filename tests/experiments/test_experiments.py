"""`dualpath experiment`: every experiment in quick mode, caching/resume, failures, the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.experiments import (
    Experiment,
    Outcome,
    Results,
    Row,
    RunSpec,
    Summary,
    experiments,
    run_experiment,
)
from dualpath.experiments.figures import paper_figures
from dualpath.experiments.pd_range import bottleneck_free_range, scenario_range
from dualpath.experiments.scenarios import ARM_27B, build
from dualpath.model.config.settings import Scenario
from dualpath.runtimes.virtual import sim

QUIET = Console(quiet=True)


class Calls:
    """Counts simulate() calls (jobs=1 runs in this process, so a patch is seen)."""

    def __init__(self) -> None:
        self.keys: list[int] = []

    def wrap(self, real: Any) -> Any:
        def counted(sc: Scenario, progress: Any = None) -> dict[str, Any]:
            self.keys.append(sc.workload.agents)
            return dict(real(sc))

        return counted


@pytest.fixture(scope="module")
def quick_all(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, Outcome]]]:
    out = tmp_path_factory.mktemp("experiments")
    outcomes = {
        name: run_experiment(exp, out, quick=True, jobs=1, console=QUIET)
        for name, exp in experiments().items()
    }
    yield out, outcomes


def test_registry_names_and_paper_figures() -> None:
    names = list(experiments())
    assert names == ["offline-agents", "pd-ratio", "append-scale", "gen-scale", "ablation",
                     "balance", "pd-range", "online-capacity", "scale", "dram-tier"]  # fmt: skip
    figs = paper_figures()
    assert set(names) <= set(figs)
    assert all(f.source for entries in figs.values() for f in entries.values())


@pytest.mark.parametrize("name", list(experiments()))
def test_quick_experiment_outputs(name: str, quick_all: tuple[Path, dict[str, Outcome]]) -> None:
    out, outcomes = quick_all
    outcome = outcomes[name]
    assert outcome.exit_code == 0, (outcome.failed, outcome.problems)
    d = out / name
    summary = json.loads((d / "summary.json").read_text())
    assert summary["experiment"] == name and summary["quick"] is True
    assert summary["jobs"] == 1 and summary["exit_code"] == 0
    assert summary["rows"], "an experiment compares at least one number with the paper"
    for row in summary["rows"]:
        assert row["paper"] is not None, row
        assert row["ours"] is not None, row
        assert row["ratio"] == pytest.approx(row["ours"] / row["paper"]), row
        assert "quick: reduced scenario, not comparable" in row["note"]
        assert row["source"]
    for run in summary["runs"]:
        assert (d / "runs" / f"{run['key']}.json").is_file()
        assert run["figures"]["jct_s"] > 0
        assert run["labels"]["model"] == "ds-27b"
    for plot in summary["plots"]:
        assert (d / plot["file"]).stat().st_size > 1000
    md = (d / "summary.md").read_text()
    assert md.startswith(f"# {experiments()[name].title}")
    assert "| figure | what | ours | paper | ours/paper | note |" in md
    assert "virtual-time runtime (dilation n/a, lag 0" in md
    assert "NOT comparable to the paper" in md
    assert all(f"]({p['file']})" in md for p in summary["plots"])


def test_second_invocation_reuses_every_run(
    quick_all: tuple[Path, dict[str, Outcome]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, _ = quick_all
    calls = Calls()
    monkeypatch.setattr(sim, "simulate", calls.wrap(sim.simulate))
    exp = experiments()["ablation"]
    before = {p: p.stat().st_mtime_ns for p in (out / "ablation" / "runs").glob("*.json")}
    again = run_experiment(exp, out, quick=True, jobs=1, console=QUIET)
    assert calls.keys == []
    assert again.exit_code == 0
    assert {r.status for r in again.records.values()} <= {"cached", "shared"}
    after = {p: p.stat().st_mtime_ns for p in (out / "ablation" / "runs").glob("*.json")}
    assert after == before


def test_identical_scenarios_are_shared_between_experiments(
    quick_all: tuple[Path, dict[str, Outcome]],
) -> None:
    # The balance runs are points of the quick offline-agents / ablation grids, except its
    # read-path-tie variant, which only it runs.
    _, outcomes = quick_all
    statuses = {k: r.status for k, r in outcomes["balance"].records.items()}
    assert {s for k, s in statuses.items() if not k.endswith("tie-pe")} == {"shared"}
    assert [s for k, s in statuses.items() if k.endswith("tie-pe")] == ["ran"]


def _tiny(policy: str, agents: int = 2) -> Scenario:
    return build(ARM_27B, True, policy=policy, agents=agents, max_len="32k")


class TwoRuns(Experiment):
    """One run that works and one that cannot (unknown policy)."""

    name = "two-runs"
    title = "test — one good run, one bad"

    def __init__(self, bad_policy: str = "no-such-policy", boom: bool = False) -> None:
        self.bad_policy = bad_policy
        self.boom = boom

    def plan(self, quick: bool) -> list[RunSpec]:
        return [
            RunSpec("good", _tiny("basic"), {"policy": "basic"}),
            RunSpec("bad", _tiny(self.bad_policy), {"policy": self.bad_policy}),
        ]

    def summarize(self, quick: bool, results: Results) -> Summary:
        if self.boom:
            raise KeyError("jct_s")
        good = results["good"].get("jct_s")
        return Summary(rows=[Row("Fig. 0", "good JCT", good, 100.0, "s")])


def test_failed_run_is_reported_and_others_kept(tmp_path: Path) -> None:
    outcome = run_experiment(TwoRuns(), tmp_path, jobs=1, console=QUIET)
    assert outcome.exit_code == 1
    assert outcome.failed == ["bad"]
    assert "no-such-policy" in (outcome.records["bad"].error or "")
    runs = tmp_path / "two-runs" / "runs"
    assert (runs / "good.json").is_file() and not (runs / "bad.json").exists()
    assert "Traceback" in (runs / "bad.error.txt").read_text()
    summary = json.loads((tmp_path / "two-runs" / "summary.json").read_text())
    assert summary["failed_runs"] == ["bad"] and summary["exit_code"] == 1
    bad = next(r for r in summary["runs"] if r["key"] == "bad")
    assert bad["status"] == "failed" and "no-such-policy" in bad["error"]
    assert summary["rows"][0]["ratio"] == pytest.approx(summary["rows"][0]["ours"] / 100.0)
    assert "failed: UnknownPolicyError" in (tmp_path / "two-runs" / "summary.md").read_text()
    # Fixed (now a known policy): the next invocation re-runs only the failed run.
    fixed = run_experiment(TwoRuns("random"), tmp_path, jobs=1, console=QUIET)
    assert fixed.exit_code == 0
    assert fixed.records["good"].status == "cached" and fixed.records["bad"].status == "ran"
    assert not (runs / "bad.error.txt").exists()


def test_summarize_error_keeps_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(sc: Scenario, progress: Any = None) -> dict[str, Any]:
        if sc.policy.name == "explode":
            raise RuntimeError("emulator blew up")
        return {"scenario": sc.model_dump(mode="json"), "jct_s": 5.0}

    monkeypatch.setattr(sim, "simulate", fake)
    outcome = run_experiment(TwoRuns("explode", boom=True), tmp_path, jobs=1, console=QUIET)
    assert outcome.exit_code == 1
    assert outcome.failed == ["bad"]
    assert any("summarize failed: KeyError" in p for p in outcome.problems)
    summary = json.loads((tmp_path / "two-runs" / "summary.json").read_text())
    assert summary["runs"][0]["figures"]["jct_s"] == 5.0
    assert "emulator blew up" in summary["runs"][1]["error"]


def test_worker_processes(tmp_path: Path) -> None:
    outcome = run_experiment(TwoRuns("random"), tmp_path, jobs=2, console=QUIET)
    assert outcome.exit_code == 0
    assert {r.status for r in outcome.records.values()} == {"ran"}
    assert outcome.records["good"].report["scenario"]["policy"]["name"] == "basic"


class Bisect(Experiment):
    """more(): keeps asking for one more agent until JCT passes a threshold."""

    name = "bisect"
    title = "test — staged runs"

    def plan(self, quick: bool) -> list[RunSpec]:
        return [RunSpec("a1", _tiny("basic", 1))]

    def more(self, quick: bool, results: Results) -> list[RunSpec]:
        n = len(results)
        return [] if n >= 3 else [RunSpec(f"a{n + 1}", _tiny("basic", n + 1))]

    def summarize(self, quick: bool, results: Results) -> Summary:
        return Summary(setup=[f"{len(results)} stages"])


def test_more_runs_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls()
    monkeypatch.setattr(sim, "simulate", calls.wrap(lambda sc: {
        "scenario": sc.model_dump(mode="json"), "jct_s": float(sc.workload.agents)}))  # fmt: skip
    outcome = run_experiment(Bisect(), tmp_path, jobs=1, console=QUIET)
    assert list(outcome.records) == ["a1", "a2", "a3"]
    assert calls.keys == [1, 2, 3]
    assert outcome.exit_code == 0


def test_bad_and_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="key"):
        RunSpec("bad/key", _tiny("basic"))

    class Twice(TwoRuns):
        def plan(self, quick: bool) -> list[RunSpec]:
            return [RunSpec("same", _tiny("basic")), RunSpec("same", _tiny("random"))]

    with pytest.raises(ValueError, match="duplicate run key 'same'"):
        run_experiment(Twice(), tmp_path, jobs=1, console=QUIET)


def test_bottleneck_free_range_formula() -> None:
    lower, upper = bottleneck_free_range(8, 1, 500, 50)
    assert lower == pytest.approx(1 / 7)
    assert upper == pytest.approx(3.5)
    # the paper testbed's hardware, read from the DS 27B preset
    sc = build(ARM_27B, False, policy="dualpath", agents=8, max_len="64k")
    assert scenario_range(sc) == pytest.approx((1 / 7, 3.5))
    # the DRAM term binds when DRAM is slow: (M/Bs - 3)/2 = 1 for M = 250
    assert bottleneck_free_range(8, 1, 250, 50)[1] == pytest.approx(1.0)


RUNNER = CliRunner()


def test_cli_list() -> None:
    result = RUNNER.invoke(app, ["experiment", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(experiments())
    assert "Fig. 7" in result.stdout


def test_cli_unknown_name_is_one_line() -> None:
    result = RUNNER.invoke(app, ["experiment", "fig99"])
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "unknown experiment 'fig99'" in err and "offline-agents" in err


def test_cli_failure_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dualpath.experiments as pkg

    monkeypatch.setattr(pkg, "experiments", lambda: {"two-runs": TwoRuns()})
    result = RUNNER.invoke(app, ["experiment", "two-runs", "--jobs", "1", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 run(s) failed (bad)" in result.stderr
    assert (tmp_path / "two-runs" / "summary.md").is_file()


def test_cli_quick_run_from_cache(quick_all: tuple[Path, dict[str, Outcome]]) -> None:
    out, _ = quick_all
    result = RUNNER.invoke(app, ["experiment", "pd-range", "--quick", "--jobs", "1",
                                 "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "reused" in result.stdout and "summary.md" in result.stdout


def test_online_capacity_bisects_between_pass_and_fail(
    quick_all: tuple[Path, dict[str, Outcome]],
) -> None:
    from dualpath.experiments.online_capacity import QUICK_GRID, bracket

    outcome = quick_all[1]["online-capacity"]
    for prefix in ("quick-ds27b-1p1d-dualpath-aps", "quick-ds660b-1p2d-basic-aps"):
        probes = {
            float(k[len(prefix) :]): r["online"]["slo_met"]
            for k, r in outcome.results.items()
            if k.startswith(prefix)
        }
        assert set(QUICK_GRID) <= set(probes)
        lo, hi = bracket(probes)
        assert lo is not None and hi is not None and lo < hi  # the quick SLO makes a bracket
        refined = set(probes) - set(QUICK_GRID)
        assert len(refined) == 1  # one bisection step in quick mode
        assert all(min(QUICK_GRID) < a < max(QUICK_GRID) for a in refined)
    # Fig. 11's column: each probe's mean trajectory JCT, where some trajectory completed
    probes_table = next(t for t in outcome.summary.tables if t.title.startswith("Probes"))
    col = probes_table.header.index("trajectory JCT (s, Fig. 11)")
    jcts = [row[col] for row in probes_table.rows if row[col] != "—"]
    assert jcts and all(float(j.replace(",", "")) > 0 for j in jcts)
    # Fig. 12 (left): each DS 660B probe's four TTFT shares, which sum to the whole TTFT
    stages = next(t for t in outcome.summary.tables if t.title.startswith("Fig. 12"))
    assert len(stages.rows) >= 2 * len(QUICK_GRID)
    for row in stages.rows:
        shares = [float(v) for v in row[3:]]
        assert abs(sum(shares) - 100.0) < 0.5, row
    fig12 = [r for r in outcome.summary.rows if r.figure == "Fig. 12 left"]
    assert [r.paper for r in fig12] == [73, 6]  # Basic's scheduling, DualPath's allocating
    assert all(r.ours is not None and 0.0 <= r.ours <= 100.0 for r in fig12)


def test_capacity_bracket() -> None:
    from dualpath.experiments.online_capacity import bracket

    assert bracket({0.1: True, 0.2: True, 0.4: False, 0.8: False}) == (0.2, 0.4)
    assert bracket({0.1: True, 0.3: False, 0.5: True}) == (0.1, 0.3)  # noisy pass above a fail
    assert bracket({0.1: False}) == (None, 0.1)
    assert bracket({0.1: True}) == (0.1, None)
    assert bracket({}) == (None, None)


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_a_long_run_says_how_far_it_is(
    mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal, a run prints a progress line every IN_RUN_EVERY_S wall seconds,
    so an hour-long paper-scale run is not an hour of silence."""
    from dualpath.experiments import runner
    from tests.runtimes.virtual.conftest import small

    monkeypatch.setattr(runner, "IN_RUN_EVERY_S", 0.0)
    sets = ["workload.mode=online", "online.aps=2", "online.max_duration_s=20"]
    report, _ = runner._simulate(small(*(sets if mode == "online" else [])), "the-key")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "the-key:" in ln]
    assert lines, "no progress line"
    what = "of at most 20 s" if mode == "online" else "turns, emulated"
    assert what in lines[-1] and "wall" in lines[-1]
    assert report["requests"]["completed"] > 0
    if mode == "offline":  # the emulated time comes with each hook call: it moves
        emulated = float(lines[-1].split("emulated ")[1].split(" s")[0].replace(",", ""))
        assert emulated > 0


def test_scale_draws_fig15_of_its_largest_run(quick_all: tuple[Path, dict[str, Outcome]]) -> None:
    out, _ = quick_all
    summary = json.loads((out / "scale" / "summary.json").read_text())
    files = [p["file"] for p in summary["plots"]]
    assert files == ["scale.png", "scale-timeline.png"]
    assert (out / "scale" / "scale-timeline.png").stat().st_size > 1000
