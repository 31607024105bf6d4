"""Every shell command in the README's code blocks runs, on a fresh clone (issue 25).

The repository under test is `git clone`d into an empty temporary folder with nothing beside
it, and each command of the README's ```bash blocks runs there, in README order, through the
rule that `RULES` gives it: the command itself with the shortest settings (a free port, a
sample of a trace), or an explicit check for what cannot run as written (`make test` collects
the suite instead of running it; a server is started, asked, and stopped once healthy). A
README command without a rule fails `test_every_readme_command_has_a_rule`: a new command
comes with its rule, so the README never lies.

The clone reuses this interpreter's virtualenv instead of installing again: `VENV` points
make at it (the Makefile's `VENV ?= .venv`), `make -o STAMP` keeps make from reinstalling
into it, and `PYTHONPATH` makes the clone's own package the one that runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.polling import wait_until

ROOT = REPO
VENV = Path(sys.prefix)
STAMP = VENV / ".installed"  # the Makefile's $(STAMP): never remade from the clone
SHELLS = {"bash", "sh", "shell"}

pytestmark = pytest.mark.slow


# --- the README's commands ---------------------------------------------------------------
def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` outside quotes after a blank)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def readme_commands(text: str) -> list[str]:
    """The commands of every fenced shell block, continuation lines joined, comments and
    surplus blanks removed. A fenced block without a language fails: it might hide one."""
    commands: list[str] = []
    for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```", text, re.S | re.M):
        lang = info.strip()
        if not lang:
            raise AssertionError(f"README: a code block without a language:\n{body}")
        if lang not in SHELLS:
            continue
        joined = re.sub(r"\\\n", " ", body)
        for line in joined.splitlines():
            command = " ".join(_strip_comment(line).split())
            if command:
                commands.append(command)
    return commands


# --- the clone and how commands run there ------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(pgid: int) -> None:
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)


@dataclass
class Clone:
    path: Path
    env: dict[str, str]
    log: Path
    server: subprocess.Popen[bytes] | None = None
    server_port: int = 0
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def sh(self, command: str, timeout_s: float) -> str:
        """Run `command` with bash in the clone; fail with its output unless it exits 0."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{out[-4000:]}"
        return out

    def make(self, args: str, timeout_s: float) -> str:
        return self.sh(f"make -o {STAMP} {args}", timeout_s)

    def start(self, command: str, log_name: str) -> subprocess.Popen[bytes]:
        """A long-running command in its own process group (stopped like Ctrl-C)."""
        with open(self.path / log_name, "wb") as log:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.path,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(proc)
        return proc

    def interrupt(self, proc: subprocess.Popen[bytes], log_name: str, timeout_s: float) -> None:
        """Ctrl-C to the process group; it must be gone within `timeout_s`."""
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait(10)
            why = f"still running {timeout_s:g} s after Ctrl-C:\n{self.tail(log_name)}"
            raise AssertionError(why) from None
        # and so must everything it started in its group (Redis, the services, Locust)
        wait_until(lambda: not _group_alive(proc.pid), 30, 0.2, what=f"{log_name}'s children")

    def tail(self, log_name: str) -> str:
        path = self.path / log_name
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    def up(self) -> int:
        """One `dualpath up --preset smoke` for the commands that need a live cluster."""
        if self.server is None:
            self.server_port = _free_port()
            cmd = f"dualpath up --preset smoke --http-port {self.server_port} --run-dir out/up"
            server = self.server = self.start(cmd, "up.log")
            url = f"http://127.0.0.1:{self.server_port}/healthz"
            wait_until(
                lambda: _answers(url) or server.poll() is not None,
                120,
                0.5,
                what="dualpath up to answer /healthz",
            )
            assert server.poll() is None, self.tail("up.log")
        return self.server_port


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    path = tmp_path_factory.mktemp("fresh") / "repo"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(path)],
        check=True,
        timeout=120,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS")}
    env.update(
        VENV=str(VENV),
        VIRTUAL_ENV=str(VENV),
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(path / "services"),
        NO_MKDOCS_2_WARNING="1",
    )
    c = Clone(path, env, path / "commands.log")
    where = c.sh("python -c 'import dualpath; print(dualpath.__file__)'", 60).strip()
    assert where.startswith(str(path)), f"the clone's package must run, not {where}"
    yield c
    for proc in c.children:  # whatever a failed rule left running
        _kill_group(proc.pid)
        proc.wait(10)


# --- one rule per README command ----------------------------------------------------------
Rule = Callable[[Clone], None]


def _make_run(c: Clone) -> None:
    c.make("run HTTP_PORT=0", 400)
    report = json.loads((c.path / "out/report.json").read_text())
    assert report["integrity"]["blocks_lost"] == 0
    for name in ("report.md", "report.png"):
        assert (c.path / "out" / name).stat().st_size > 0, name


def _make_test(c: Clone) -> None:
    # make's -q and this -q: one line per test module, "path: N" (make fails on any error)
    out = c.make("test PYTEST_ARGS='--collect-only -q'", 300)
    counts = {m[0]: int(m[1]) for m in re.findall(r"^(tests/\S+\.py): (\d+)$", out, re.M)}
    assert sum(counts.values()) > 0, out[-2000:]
    assert counts.get("tests/docs/test_readme_commands.py"), "the suite lacks this test"


def _make_sim(c: Clone) -> None:
    c.make("sim", 300)
    assert json.loads((c.path / "out/sim.json").read_text())["jct_s"] > 0


def _activate(c: Clone) -> None:
    # The README's `.venv` is the clone's; here the venv is this interpreter's (VENV).
    where = c.sh(f". {VENV}/bin/activate && command -v dualpath", 30).strip()
    assert where == str(VENV / "bin" / "dualpath"), where


def _sim(command: str) -> Rule:
    """A README `dualpath sim ...` as written, its report to a file of its own."""

    def rule(c: Clone) -> None:
        out_file = f"out/readme-{re.sub(r'[^a-z0-9]+', '-', command)[:80]}.json"
        c.sh(f"{command} --quiet --out {out_file}", 300)
        assert json.loads((c.path / out_file).read_text())["jct_s"] > 0

    return rule


def _up(c: Clone) -> None:
    port = c.up()
    assert _answers(f"http://127.0.0.1:{port}/v1/models")


def _curl(command: str) -> Rule:
    def rule(c: Clone) -> None:
        port = c.up()
        assert "localhost:8000" in command
        out = c.sh(command.replace("localhost:8000", f"127.0.0.1:{port}"), 120)
        answer = json.loads(out)
        assert answer["choices"][0]["message"]["content"], answer
        assert answer["usage"]["completion_tokens"] == 8, answer

    return rule


def _make_load(c: Clone) -> None:
    web = _free_port()
    proc = c.start(f"make -o {STAMP} load HTTP_PORT=0 WEB_PORT={web}", "load.log")
    url = f"http://127.0.0.1:{web}/"
    wait_until(lambda: _answers(url) or proc.poll() is not None, 180, 0.5, what="Locust's web UI")
    assert proc.poll() is None, c.tail("load.log")
    c.interrupt(proc, "load.log", 90)
    assert not _answers(url), "the web UI still answers after Ctrl-C"


def _make_docs(c: Clone) -> None:
    c.make("docs", 300)
    assert (c.path / "site/index.html").exists()


def _stop_up(c: Clone) -> None:
    """Not a README command: the `dualpath up` of the rules above stops on Ctrl-C."""
    if c.server is not None:
        c.interrupt(c.server, "up.log", 90)
        assert "every service exited" in c.tail("up.log"), c.tail("up.log")


def _rules() -> dict[str, Rule]:
    cmds = {
        "make run": _make_run,
        "make test": _make_test,
        "make sim": _make_sim,
        ". .venv/bin/activate": _activate,
        "dualpath up --preset smoke": _up,
        "make load": _make_load,
        "make docs": _make_docs,
    }
    sims = (  # each a few seconds as written
        "dualpath sim --preset paper-ds27b-1p1d --agents 32 --policy basic",
        "dualpath sim --preset paper-ds27b-1p1d --agents 32 --policy dualpath",
        "dualpath sim --trace data/traces/mooncake_synthetic/synthetic_trace.jsonl --time-scale 20",
        "dualpath sim --trace data/traces/weka_claude_code --trace-sessions 8 --time-scale 0.01",
    )
    for command in sims:
        cmds[command] = _sim(command)
    curl = (
        "curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' "
        """-d '{"model":"ds-27b","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'"""
    )
    cmds[curl] = _curl(curl)
    return cmds


RULES = _rules()
COMMANDS = readme_commands((ROOT / "README.md").read_text())


def test_every_readme_command_has_a_rule() -> None:
    missing = [c for c in COMMANDS if c not in RULES]
    stale = [c for c in RULES if c not in COMMANDS]
    assert not missing, f"README commands with no rule in {__file__}: {missing}"
    assert not stale, f"rules for commands the README no longer has: {stale}"


@pytest.mark.timeout(1200)  # every command in one test: they share the clone, in order
def test_readme_commands_run_on_a_fresh_clone(clone: Clone) -> None:
    """In README order; the first failure names its command and shows its output."""
    assert (clone.path / "README.md").read_text() == (ROOT / "README.md").read_text(), (
        "commit the README first: the clone has the committed one"
    )
    timings: list[str] = []
    try:
        for command in COMMANDS:
            t0 = time.monotonic()
            RULES[command](clone)
            timings.append(f"{time.monotonic() - t0:6.1f} s  {command}")
    finally:
        _stop_up(clone)
        print("\n" + "\n".join(timings))
