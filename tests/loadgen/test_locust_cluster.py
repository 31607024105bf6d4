"""Real Locust (headless, its own subprocess) against a real local cluster: sessions finish,
nothing fails, the emulated TTFT/TPOT rows are in Locust's CSV; the OpenAI dialect's history
is reused (cached tokens); distributed mode (master + workers) drives sessions too."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from dualpath.loadgen.bodies import Conversation
from dualpath.loadgen.command import LocustRun, read_json
from dualpath.loadgen.scripts import load_workload
from dualpath.model.config.presets import resolve
from dualpath.runtimes.process.launcher.local import LocalCluster
from dualpath.runtimes.process.launcher.procs import log_tail
from tests.loadgen.conftest import host_of, run_locust, stats_rows

EMU_ROWS = ("TTFT", "TTST", "TPOT", "turn latency")


def _outputs(tmp_path: Path) -> dict[str, Any]:
    return {
        "progress_file": str(tmp_path / "progress.json"),
        "slo_json": str(tmp_path / "slo.json"),
    }


def test_headless_poisson_run_against_a_real_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    run = LocustRun(
        host_of(cluster),
        {"aps": 0.5, "duration": 30, **_outputs(tmp_path)},
        csv_prefix=tmp_path / "locust",
        html=tmp_path / "locust.html",
    )
    t0 = time.monotonic()
    code = run_locust(run, tmp_path / "locust.log", timeout_s=120)
    wall = time.monotonic() - t0
    log = tmp_path / "locust.log"
    assert code == 0, log_tail(log)
    progress = read_json(tmp_path / "progress.json")
    assert progress is not None
    rows = stats_rows(tmp_path / "locust")
    turns = rows[("POST", "/v1/agent/turn")]
    print(
        f"\nheadless 30 s: wall {wall:.1f} s, sessions started {progress['sessions_started']}, "
        f"completed {progress['sessions_done']}, turns {turns['Request Count']}, "
        f"failures {progress['failures']}, hit rate {progress['tokens']['hit_rate']:.3f}"
    )
    assert progress["sessions_done"] > 0 and progress["sessions_failed"] == 0
    assert progress["failures"] == 0 and int(turns["Failure Count"]) == 0
    for name in EMU_ROWS:  # the emulated latencies are Locust rows of their own
        row = rows[("EMU", name)]
        assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0
    assert int(rows[("EMU", "TTFT")]["Request Count"]) == int(turns["Request Count"])
    slo = read_json(tmp_path / "slo.json")
    assert slo is not None and slo["verdict"] in ("met", "MISSED")
    # the verdict comes last: it may count turns answered after the CSV's final write
    assert slo["emulated_ms"]["TTFT"]["n"] >= int(turns["Request Count"])
    assert (tmp_path / "locust.html").read_text().count("EMU") > 0
    assert progress["tokens"]["cached"] > 0  # later turns of a session hit its own KV


def _post(host: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        host + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        data: dict[str, Any] = json.load(resp)
        return data


def test_openai_history_is_reused_as_cached_tokens(cluster: LocalCluster) -> None:
    """The chat bodies the locustfile sends, turn by turn, straight to the front door."""
    workload = load_workload(resolve("smoke", {}, []), 1)
    script = workload.scripts[0]
    chat = Conversation("cached-check", workload.block_tokens)
    cached = []
    for i, turn in enumerate(script.turns[:4]):
        answer = _post(host_of(cluster), "/v1/chat/completions", chat.body(i, turn))
        cached.append(answer["usage"]["prompt_tokens_details"]["cached_tokens"])
        chat.reply(turn, answer["choices"][0]["message"]["content"])
    print(f"\nopenai cached_tokens by turn: {cached}")
    assert cached[0] == 0 and all(c > 0 for c in cached[1:])


def test_openai_dialect_under_locust(cluster: LocalCluster, tmp_path: Path) -> None:
    run = LocustRun(
        host_of(cluster),
        {"dialect": "openai", "arrivals": "closed", "concurrency": 3, "duration": 12}
        | _outputs(tmp_path),
        csv_prefix=tmp_path / "locust",
    )
    assert run_locust(run, tmp_path / "locust.log", timeout_s=90) == 0
    rows = stats_rows(tmp_path / "locust")
    chat = rows[("POST", "/v1/chat/completions")]
    assert int(chat["Request Count"]) > 3 and int(chat["Failure Count"]) == 0
    slo = read_json(tmp_path / "slo.json")
    assert slo is not None
    print(f"\nopenai under Locust: {chat['Request Count']} turns, tokens {slo['tokens']}")
    assert slo["tokens"]["cached"] > 0 and slo["sessions"]["started"] >= 3


def test_distributed_master_and_workers(cluster: LocalCluster, tmp_path: Path) -> None:
    run = LocustRun(
        host_of(cluster),
        {"arrivals": "closed", "concurrency": 4, "duration": 12, **_outputs(tmp_path)},
        processes=2,
        csv_prefix=tmp_path / "locust",
    )
    code = run_locust(run, tmp_path / "locust.log", timeout_s=90)
    assert code == 0, log_tail(tmp_path / "locust.log")
    progress = read_json(tmp_path / "progress.json")
    rows = stats_rows(tmp_path / "locust")
    assert progress is not None and progress["sessions_started"] >= 4
    assert progress["failures"] == 0
    assert int(rows[("EMU", "TTFT")]["Request Count"]) > 0
    assert "2 workers connected" in (tmp_path / "locust.log").read_text()


def test_bounded_sessions_end_for_good_and_end_the_test(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A finished session is never respawned: with --sessions 3 exactly 3 run, then the test
    ends by itself (no --duration)."""
    run = LocustRun(
        host_of(cluster),
        # shorter generations keep the sessions (hence the test) short
        {"arrivals": "closed", "concurrency": 2, "sessions": 3, "set": "workload.gen_scale=0.2"}
        | _outputs(tmp_path),
        csv_prefix=tmp_path / "locust",
    )
    t0 = time.monotonic()
    assert run_locust(run, tmp_path / "locust.log", timeout_s=120) == 0
    progress = read_json(tmp_path / "progress.json")
    assert progress is not None
    print(f"\n3 bounded sessions: ended by themselves after {time.monotonic() - t0:.1f} s")
    assert progress["state"] == "complete"
    assert progress["sessions_started"] == progress["sessions_done"] == 3
    assert progress["turns_done"] == progress["turns_total"]
