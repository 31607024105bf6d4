"""Structured logs (dualpath/logs.py) and the plain progress line of a run without a
terminal (cli/main.py `_ProgressLine`)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dualpath.cli.main import app
from dualpath.logs import (
    FORMAT_ENV,
    LEVEL_ENV,
    JsonFormatter,
    TextFormatter,
    configure,
    event,
    resolve,
)

SUBPROCESS_TIMEOUT_S = 120


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure() changes the process's root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _record(logger: logging.Logger, emit: Callable[[], None]) -> logging.LogRecord:
    """The record one logging call makes (a handler that keeps it)."""
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    h = Keep()
    logger.addHandler(h)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        emit()
    finally:
        logger.removeHandler(h)
    assert len(got) == 1
    return got[0]


def test_json_line_has_the_fixed_keys_then_the_fields() -> None:
    log = logging.getLogger("test.logs.json")
    rec = _record(log, lambda: event(log, "turn_done", request_id=7, path="pe", ttft_s=0.25))
    out = json.loads(JsonFormatter("scheduler").format(rec))
    assert list(out)[:4] == ["ts", "level", "service", "event"]
    assert out["level"] == "info" and out["service"] == "scheduler"
    assert out["event"] == "turn_done" and out["request_id"] == 7 and out["ttft_s"] == 0.25
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", out["ts"])


def test_json_line_stays_json_for_odd_values_and_errors() -> None:
    log = logging.getLogger("test.logs.odd")
    try:
        raise KeyError("block 3")
    except KeyError as exc:
        err = exc
    rec = _record(
        log,
        lambda: event(
            log, "report_failed", logging.ERROR, exc=err, trace=True, x=float("nan"),
            where=Path("/a b"), event="clash",
        ),
    )  # fmt: skip
    line = JsonFormatter("scheduler").format(rec)
    assert "\n" not in line  # one line, traceback included
    out = json.loads(line)  # NaN is no JSON: logged as a string
    assert out["x"] == "nan" and out["where"] == "/a b" and out["event"] == "report_failed"
    assert out["level"] == "error" and out["error"] == "KeyError: 'block 3'"
    assert "Traceback" in out["traceback"]


def test_a_plain_log_call_is_one_line_too() -> None:
    log = logging.getLogger("test.logs.plain")
    rec = _record(log, lambda: log.warning("persist of %s failed: %s", "s1[0:4]", "UNAVAILABLE"))
    out = json.loads(JsonFormatter("decode0").format(rec))
    assert out["event"] == "log" and out["level"] == "warning"
    assert out["msg"] == "persist of s1[0:4] failed: UNAVAILABLE"
    assert out["logger"] == "test.logs.plain"
    text = TextFormatter("decode0").format(rec)
    assert text.split(" ", 1)[1] == "WARNING decode0 persist of s1[0:4] failed: UNAVAILABLE"


def test_text_line_is_key_value_with_quoted_spaces() -> None:
    log = logging.getLogger("test.logs.text")
    rec = _record(
        log, lambda: event(log, "node_lost", logging.WARNING, node="decode1", why="no heartbeat")
    )
    line = TextFormatter("scheduler").format(rec)
    assert line.split(" ", 1)[1] == 'WARNING scheduler node_lost node=decode1 why="no heartbeat"'


def test_flag_beats_environment_beats_default() -> None:
    assert resolve(None, None, {}) == ("text", "info")
    assert resolve(None, None, {FORMAT_ENV: "JSON", LEVEL_ENV: "debug"}) == ("json", "debug")
    assert resolve("text", "error", {FORMAT_ENV: "json"}) == ("text", "error")
    with pytest.raises(ValueError, match=r"--log-format 'yaml'.*text, json"):
        resolve("yaml", None, {})
    with pytest.raises(ValueError, match=r"\$DUALPATH_LOG_LEVEL 'loud'"):
        resolve(None, None, {LEVEL_ENV: "loud"})


@pytest.mark.usefixtures("root_logging")
def test_configure_replaces_only_its_own_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    configure("storage", "text", "info")
    configure("storage", "json", "warning")  # again: still one handler of ours
    assert other in root.handlers and root.level == logging.WARNING
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)  # the handler follows sys.stderr
    log = logging.getLogger("test.logs.configure")
    event(log, "ignored")  # info < warning
    event(log, "fence_exit", logging.ERROR, exit_code=75)
    lines = stream.getvalue().splitlines()
    assert [json.loads(ln)["event"] for ln in lines] == ["fence_exit"]


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["serve", "storage", "--log-format", "yaml"], {}, "--log-format 'yaml'"),
        (["serve", "storage", "--log-level", "loud"], {}, "--log-level 'loud'"),
        (["serve", "storage"], {FORMAT_ENV: "xml"}, "$DUALPATH_LOG_FORMAT 'xml'"),
        (["run", "--log-format", "yaml"], {}, "--log-format 'yaml'"),
        (["up", "--log-level", "loud"], {}, "--log-level 'loud'"),
    ],
)
@pytest.mark.usefixtures("root_logging")
def test_bad_log_settings_are_one_line(args: list[str], env: dict[str, str], needle: str) -> None:
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


@pytest.mark.usefixtures("root_logging")
def test_a_service_that_cannot_start_says_so_in_its_format() -> None:
    args = ["serve", "storage", "--redis-url", "redis://127.0.0.1:1/0", "--log-format", "json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    lines = [json.loads(ln) for ln in res.output.splitlines() if ln.strip()]
    assert [ln["event"] for ln in lines] == ["service_failed"]
    assert lines[0]["service"] == "storage" and "Redis does not answer" in lines[0]["error"]


# --- the progress line without a terminal ---------------------------------------------
def _sim(tmp_path: Path, *args: str, every: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DP_", "DUALPATH_"))}
    env["DUALPATH_PROGRESS_S"] = every
    return subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", "sim", "--preset", "smoke", *args],
        capture_output=True,  # stderr is a pipe: no terminal
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_a_run_without_a_terminal_prints_progress_lines(tmp_path: Path) -> None:
    # 16 agents take ~1 s of wall time: many 0.05 s intervals
    proc = _sim(tmp_path, "--agents", "16", every="0.05")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sim: ")]
    assert lines, proc.stderr[-2000:]
    m = re.fullmatch(
        r"sim: (\d+)/(\d+|\?) turns, emulated ([\d.]+) s, wall \d+ s, [\d.]+ turns/s", lines[-1]
    )
    assert m is not None, lines[-1]
    assert "DualPath testbed run" in proc.stdout  # the summary still follows, on stdout


def test_work_without_an_emulated_clock_claims_no_emulated_time() -> None:
    # the planner's bound phase: no clock, so no "emulated 0 s" (it was printed before)
    from dualpath.cli.progress import _ProgressLine

    line = _ProgressLine("bounds", "candidates", 10.0)
    line.hook(3, 9)
    assert re.fullmatch(r"bounds: 3/9 candidates, wall \d+ s, [\d.]+ candidates/s", line.line())
    line.hook(4, 9, 12.5)  # a virtual run gives its emulated time with each call
    assert "emulated 12.5 s, " in line.line()


def test_quiet_prints_no_progress_and_a_bad_interval_is_refused(tmp_path: Path) -> None:
    quiet = _sim(tmp_path, "--agents", "2", "--quiet", every="0.01")
    assert quiet.returncode == 0 and "sim: " not in quiet.stderr
    bad = _sim(tmp_path, "--agents", "2", every="soon")
    assert bad.returncode == 2
    assert "$DUALPATH_PROGRESS_S 'soon'" in bad.stderr and "Traceback" not in bad.stderr
