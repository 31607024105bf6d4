"""`dualpath experiment NAME --set ...`: every run with the setting, in a folder of its own
(the default runs' reports untouched), the summary saying so; bad items fail in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.experiments import Experiment, Results, Row, RunSpec, Summary
from dualpath.experiments.overrides import set_digest
from dualpath.model.config.presets import resolve

RUNNER = CliRunner()
SET = "engine.fetch_mode=on-change"


class OneRun(Experiment):
    name = "one-run"
    title = "test — one tiny offline run"

    def plan(self, quick: bool) -> list[RunSpec]:
        sc = resolve("smoke", {"workload": {"agents": 2}}, [])
        return [RunSpec("tiny", sc, {"policy": "dualpath"})]

    def summarize(self, quick: bool, results: Results) -> Summary:
        return Summary(rows=[Row("Fig. 0", "JCT", results["tiny"].get("jct_s"), 1.0, "s")])


@pytest.fixture
def one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import dualpath.experiments as pkg

    monkeypatch.setattr(pkg, "experiments", lambda: {"one-run": OneRun()})


def _invoke(out: Path, *extra: str) -> tuple[int, str]:
    res = RUNNER.invoke(app, ["experiment", "one-run", "--jobs", "1", "--out", str(out), *extra])
    return res.exit_code, res.output


@pytest.mark.usefixtures("one_run")
def test_set_applies_to_every_run_in_a_folder_of_its_own(tmp_path: Path) -> None:
    assert _invoke(tmp_path)[0] == 0
    default = (tmp_path / "one-run" / "runs" / "tiny.json").read_text()
    code, output = _invoke(tmp_path, "--set", SET)
    assert code == 0, output
    folder = tmp_path / f"one-run+set-{set_digest([SET])}"
    report = json.loads((folder / "runs" / "tiny.json").read_text())
    assert report["scenario"]["engine"]["fetch_mode"] == "on-change"
    assert "reused" not in output  # the default run's report is not taken for it
    assert f"every run with --set {SET}" in (folder / "summary.md").read_text()
    assert (tmp_path / "one-run" / "runs" / "tiny.json").read_text() == default
    assert json.loads(default)["scenario"]["engine"]["fetch_mode"] == "per-forward"
    code, output = _invoke(tmp_path, "--set", SET)  # a second time: from its own cache
    assert code == 0 and "reused" in output, output


@pytest.mark.usefixtures("one_run")
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--set", "engine.fetch_mode=sometimes"], "engine.fetch_mode"),
        (["--set", "engine.fetch_mode"], "expected path.to.key=value"),
        (["--set", SET, "--collect"], "--set: local runs only"),
    ],
)
def test_a_bad_set_is_one_line_before_anything_runs(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    res = RUNNER.invoke(app, ["experiment", "one-run", "--out", str(tmp_path), *extra])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in res.output, err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_the_digest_ignores_the_order_of_the_items() -> None:
    assert set_digest(["a=1", "b=2"]) == set_digest(["b=2", "a=1"]) != set_digest(["a=1"])
