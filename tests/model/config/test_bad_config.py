"""Every bad configuration ends the same way: exit code 2, one line on stderr naming the
setting or flag (and what is accepted), no traceback, and quickly.

Settings of every section (finite, bounded, typed), unknown keys, malformed `--set`, presets
and preset files, DP_* variables, and the flags of sim, run, up, serve, experiment and
roofline. Most cases run in-process through CliRunner (the same code path as the console
script, only faster); the cases that used to hang and the commands that start processes
(`run`, `up`) run as subprocesses with a short timeout, and must refuse before they start
anything. The corruption case at the end: a corrupted run still writes its report (the
scheduler's message for it is tested in
tests/runtimes/process/serving/test_serving_remote_scheduler.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dualpath.cli.main import app

pytestmark = pytest.mark.timeout(30)  # a case that hangs fails here instead of stalling CI

SUBPROCESS_TIMEOUT_S = 20.0


@pytest.fixture(autouse=True)
def _no_dp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own DP_* variables must not change what a case tests."""
    for key in list(os.environ):
        if key.startswith("DP_"):
            monkeypatch.delenv(key)


def _assert_one_line(code: int | None, stderr: str, needle: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert needle in lines[0], stderr


def _check(args: list[str], needle: str, env: dict[str, str] | None = None) -> None:
    res = CliRunner().invoke(app, args, env=env, prog_name="dualpath")
    # CliRunner keeps an uncaught exception instead of printing it: that is the traceback
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    _assert_one_line(res.exit_code, res.stderr, needle)


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    return subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
        cwd=cwd,
        env=env,
    )


# --- settings, through `sim --set` (no simulation starts: validation comes first) ---------
SETTINGS = [
    # hardware: finite, and bounded so byte rates and emulated time stay finite
    ("hardware.snic_gbps=inf", "hardware.snic_gbps"),  # was a traceback in the links
    ("hardware.snic_gbps=.nan", "hardware.snic_gbps"),
    ("hardware.snic_gbps=0", "hardware.snic_gbps"),
    ("hardware.snic_gbps=1e300", "hardware.snic_gbps"),  # inf bytes/s after conversion
    ("hardware.snic_gbps=1e-300", "hardware.snic_gbps"),  # used to hang
    ("hardware.cnic_gbps=-400", "hardware.cnic_gbps"),
    ("hardware.cnic_gbps=fast", "hardware.cnic_gbps"),
    ("hardware.dram_gbs=1e-300", "hardware.dram_gbs"),  # used to hang
    ("hardware.dram_buffer_gb=0", "hardware.dram_buffer_gb"),
    ("hardware.hbm_gb=.inf", "hardware.hbm_gb"),
    ("hardware.hbm_reserve_gb=-1", "hardware.hbm_reserve_gb"),
    ("hardware.storage_gbs=1e-300", "hardware.storage_gbs"),  # used to hang
    ("hardware.storage_targets=1000000", "hardware.storage_targets"),  # used to hang
    ("hardware.storage_targets=-1", "hardware.storage_targets"),
    # topology
    ("topology.decode_nodes=0", "topology.decode_nodes"),
    ("topology.prefill_nodes=-3", "topology.prefill_nodes"),
    ("topology.gpus_per_node=65", "topology.gpus_per_node"),
    ("topology.gpus_per_node=2.5", "topology.gpus_per_node"),
    ("topology.prefill_group_nodes=-1", "topology.prefill_group_nodes"),
    ("topology.decode_group_nodes=1000000", "decode_group_nodes"),
    ("topology.decode_nodes=5000", "limits.max_engines"),
    # virtual lanes: a VL with no weight would never send its traffic
    ("vl.kv_vl=15", "vl.kv_vl"),
    ("vl.kv_vl=5", "vl.kv_vl"),  # was "Event loop is closed"
    ("vl.low={2: -5}", "vl.low"),  # was a traceback in the links
    ("vl.high={20: 1}", "vl.high"),
    ("vl.high_limit=256", "vl.high_limit"),
    ("vl.mtu_bytes=0", "vl.mtu_bytes"),
    ("vl.isolation=maybe", "vl.isolation"),
    # engine
    ("engine.block_tokens=0", "engine.block_tokens"),
    ("engine.layer_group=-1", "engine.layer_group"),
    ("engine.compute_quota_ms=1e-300", "engine.compute_quota_ms"),  # used to hang
    ("engine.fetch_interval_ms=1e-9", "engine.fetch_interval_ms"),  # hung in periodic mode
    ("engine.fetch_interval_ms=.inf", "engine.fetch_interval_ms"),
    ("engine.fetch_mode=sometimes", "engine.fetch_mode"),
    ("engine.decode_chunk_steps=0", "engine.decode_chunk_steps"),
    # policy
    ("policy.alpha_s=1e300", "policy.alpha_s"),  # was an OverflowError
    ("policy.beta_s=.nan", "policy.beta_s"),
    ("policy.alpha_tokens=0", "policy.alpha_tokens"),
    ("policy.beta_tokens=-1", "policy.beta_tokens"),
    ("policy.z_factor=0", "policy.z_factor"),
    ("policy.path_tie=both", "policy.path_tie"),
    ("policy.name=magic", "accepted: "),
    # workload, including the trace keys
    ("workload.append_scale=inf", "workload.append_scale"),  # was an int overflow
    ("workload.append_scale=1e300", "workload.append_scale"),
    ("workload.gen_scale=-1", "workload.gen_scale"),
    ("workload.gen_scale=1e300", "workload.gen_scale"),
    ("workload.agents=0", "workload.agents"),
    ("workload.agents=many", "workload.agents"),
    ("workload.max_len=lots", "--max-len"),
    ("workload.mode=batch", "workload.mode"),
    ("workload.source=nope", "workload.source"),
    ("workload.source=weka", "needs `trace`"),
    ("workload.replay=sideways", "workload.replay"),
    ("workload.time_scale=.nan", "workload.time_scale"),
    ("workload.time_scale=0", "workload.time_scale"),
    ("workload.time_scale=1e300", "workload.time_scale"),
    ("workload.trace_sessions=0", "workload.trace_sessions"),
    ("workload.trace_requests=-5", "workload.trace_requests"),
    ("workload.trace_turns=0", "workload.trace_turns"),
    ("workload.trace=[1, 2]", "workload.trace"),
    ("workload.subagents=maybe", "workload.subagents"),
    # online
    ("online.aps=-1", "online.aps"),
    ("online.aps=.inf", "online.aps"),
    ("online.window_s=0", "online.window_s"),
    ("online.lookback_s=.nan", "online.lookback_s"),
    ("online.check_interval_s=1e-9", "online.check_interval_s"),  # used to hang
    ("online.max_duration_s=1e300", "online.max_duration_s"),  # was a numpy traceback
    ("online.think_time_s=1e300", "online.think_time_s"),  # used to hang
    ("online.slo_ttft_s=0", "online.slo_ttft_s"),
    ("online.slo_tpot_ms=.inf", "online.slo_tpot_ms"),
    ("online.steady_tolerance=-0.1", "online.steady_tolerance"),
    # faults, seed, names, limits
    ("faults.corrupt_blocks=-1", "faults.corrupt_blocks"),
    ("faults.corrupt_blocks=lots", "faults.corrupt_blocks"),
    ("seed=-1", "seed"),  # was a numpy traceback
    ("seed=1.5", "seed"),
    ("model=gpt-9", "accepted: "),
    ("gpu=tpu", "accepted: "),
    ("limits.max_agents=0", "limits.max_agents"),
    ("limits.max_processes=1", "limits.max_processes"),
    # unknown keys and sections
    ("hardware.wat=1", "hardware.wat"),
    ("nosuch.key=1", "nosuch"),
    ("topology=3", "topology"),
]


@pytest.mark.parametrize(("item", "needle"), SETTINGS)
def test_bad_setting(item: str, needle: str) -> None:
    _check(["sim", "--quiet", "--set", item], needle)


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["workload.mode=online", "online.aps=1000"], "limits.max_agents"),  # arrivals
        (["topology.decode_nodes=4", "topology.decode_group_nodes=3"], "decode_group_nodes"),
        (["model=deepseek-v3.2", "topology.gpus_per_node=1"], "HBM"),
        (["topology.decode_nodes=1", "topology.decode_nodes.x=2"], "not a section"),
        (["workload.source=mooncake", "workload.trace=/no/such.jsonl"], "workload.trace"),
        (["workload.source=synthetic-pooled", "workload.max_len=48k"], "64k only"),
        (["workload.source=synthetic-short-first", "workload.max_len=32k"], "48k, 64k only"),
    ],
)
def test_bad_combination(sets: list[str], needle: str) -> None:
    _check(["sim", "--quiet", *[a for s in sets for a in ("--set", s)]], needle)


# --- malformed --set --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("seed", "expected path.to.key=value"),
        ("=3", "empty key"),
        ("hardware..snic_gbps=1", "empty key"),
        ("seed=[red]x", "[red]x"),  # user text is shown as typed, not read as rich markup
    ],
)
def test_malformed_set(item: str, needle: str) -> None:
    _check(["sim", "--quiet", "--set", item], needle)


# --- presets ------------------------------------------------------------------------------
PRESET_FILES = {
    "syntax.yaml": ("topology: [1, 2\n", "not valid YAML"),
    "list.yaml": ("- 1\n- 2\n", "must be a mapping"),
    "unknown.yaml": ("topology: {decode_nodes: 1}\nbogus: 3\n", "bogus"),
    "type.yaml": ("topology: {decode_nodes: many}\n", "topology.decode_nodes"),
    "inf.yaml": ("hardware: {cnic_gbps: .inf}\n", "hardware.cnic_gbps"),
}


@pytest.mark.parametrize("name", sorted(PRESET_FILES))
def test_bad_preset_file(tmp_path: Path, name: str) -> None:
    text, needle = PRESET_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    _check(["sim", "--quiet", "--preset", str(path)], needle)


def test_preset_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"seed: \xff\xfe\n")
    _check(["sim", "--quiet", "--preset", str(path)], "--preset")


@pytest.mark.parametrize(
    ("preset", "needle"),
    [("nope", "accepted: "), ("missing.yaml", "does not exist"), (".", "is a folder")],
)
def test_bad_preset_name(preset: str, needle: str) -> None:
    _check(["sim", "--quiet", "--preset", preset], needle)


# --- DP_* environment ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DP_TOPOLOGY": "notjson"}, "DP_TOPOLOGY"),
        ({"DP_HARDWARE__SNIC_GBPS": "inf"}, "hardware.snic_gbps"),
        ({"DP_SEED": "-1"}, "seed"),
    ],
)
def test_bad_environment(env: dict[str, str], needle: str) -> None:
    _check(["sim", "--quiet"], needle, env=env)


# --- flags of sim, roofline, experiment, serve ---------------------------------------------
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "--agents", "abc"], "--agents"),
        (["sim", "--jobs", "1"], "--jobs"),
        (["sim", "--prefill-nodes", "0"], "topology.prefill_nodes"),
        (["sim", "--aps", "0"], "online.aps"),
        (["sim", "--aps", "1e9"], "limits.max_agents"),  # was a numpy traceback
        (["sim", "--time-scale", "inf"], "workload.time_scale"),
        (["sim", "--trace-sessions", "0"], "workload.trace_sessions"),
        (["sim", "--replay", "sideways"], "workload.replay"),
        (["sim", "--seed", "-1"], "seed"),
        (["sim", "--out", "/proc/no-such-dir/r.json"], "--out"),
        (["roofline", "--bogus"], "--bogus"),
        (["roofline", "extra"], "extra"),
        (["experiment", "ablation", "--jobs", "0"], "--jobs"),
        (["experiment", "list", "--jobs", "-1"], "--jobs"),
        (["experiment", "ablation", "--jobs", "many"], "--jobs"),
        (["experiment", "nope"], "accepted: list"),
        (["experiment", "ablation", "--only", "("], "--only"),
        (["experiment"], "Missing argument"),
        (["nosuchcommand"], "nosuchcommand"),
        (["serve", "chef"], "ROLE"),
        (["serve", "storage", "--speedup", "inf"], "--speedup"),
        (["serve", "storage", "--real-payload", "nan"], "--real-payload"),
        (["serve", "storage", "--grpc-port", "70000"], "--grpc-port"),
        (["serve", "storage", "--admin-port", "-1"], "--admin-port"),
        (["serve", "storage", "--run-id", "a b"], "--run-id"),
        (["serve", "storage", "--epoch", "nan"], "--epoch"),
        (["serve", "storage", "--redis-url", "notaurl"], "--redis-url"),
        (["serve", "prefill", "--node", "5"], "--node"),
        (["serve", "storage", "--set", "seed=-1"], "seed"),
        (["sim", "--fault", "kill:decode0@1+2"], "needs the process runtime"),
        (["sim", "--fault", "degrade:prefill0.snic=0@1"], "GBPS must be > 0"),
        (["sim", "--fault", "degrade:prefill5.snic=5@1"], "no node 'prefill5'"),
        (["sim", "--fault", "explode:decode0@1"], "unknown kind"),
        (["sim", "--fault", "pause:decode0@1"], "pause needs a duration"),
    ],
)
def test_bad_flag(args: list[str], needle: str) -> None:
    _check(args, needle)


def test_out_that_is_a_folder(tmp_path: Path) -> None:
    _check(["sim", "--quiet", "--out", str(tmp_path)], "--out")


def test_experiment_out_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    _check(["experiment", "ablation", "--quick", "--out", str(path)], "--out")


# --- subprocesses: what used to hang, and the commands that start processes ----------------
BAD_TRACE = ["--set", "workload.source=mooncake", "--set", "workload.trace=bad.jsonl"]
SUBPROCESS_CASES = [
    (["sim", "--quiet", "--set", "topology.decode_nodes=100000"], "limits.max_engines"),
    (["sim", "--quiet", "--agents", "100000000"], "limits.max_agents"),
    (["run", "--quiet", "--redis-url", "redis://127.0.0.1:1/0"], "--redis-url"),
    (["run", "--quiet", "--redis-url", "notaurl"], "--redis-url"),
    (["run", "--quiet", "--real-payload", "nan"], "--real-payload"),  # used to exit 0
    (["run", "--quiet", "--speedup", "inf"], "--speedup"),  # used to fail after 22 s
    (["run", "--quiet", "--agents", "100000000"], "limits.max_agents"),
    (["run", "--quiet", "--set", "topology.decode_nodes=100"], "limits.max_processes"),
    (["run", "--quiet", "--out", "."], "--out"),
    (["up", "--redis-url", "notaurl"], "--redis-url"),
    (["up", "--real-payload", "nan"], "--real-payload"),
    (["up", "--set", "seed=-1"], "seed"),
    (["up", "--restart", "sometimes"], "--restart"),
    (["up", "--max-restarts", "-1"], "--max-restarts"),
    (["up", "--set", "hardware.snic_gbps=inf"], "hardware.snic_gbps"),
    (["up", "--http-port", "70000"], "--http-port"),
    (["up", "--set", "model=deepseek-v3.2", "--set", "topology.gpus_per_node=1"], "HBM"),
    (["up", "--set", "workload.source=mooncake", "--set", "workload.trace=no.jsonl"], "trace"),
    (["run", "--quiet", *BAD_TRACE], "bad.jsonl"),  # a trace line with a bad field
    (["up", "--fault", "kill:decode7@1+1"], "no service 'decode7'"),
    (["run", "--quiet", "--fault", "redis-drop@5"], "redis-drop needs a duration"),
]


@pytest.mark.parametrize(("args", "needle"), SUBPROCESS_CASES)
def test_refused_before_anything_starts(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "bad.jsonl").write_text('{"timestamp": 0, "input_length": "x"}\n')
    proc = _run_cli(args, cwd=tmp_path)
    _assert_one_line(proc.returncode, proc.stderr, needle)
    # no service was spawned: the launcher creates its log folder before the first one
    assert not list(tmp_path.rglob("logs")), list(tmp_path.rglob("*"))
    assert not list(tmp_path.rglob("scenario.yaml"))


# --- the process runtime's integrity failure (faults.corrupt_blocks) ---------------------
@pytest.mark.timeout(120)
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="needs runtimes/process/launcher/run.py to build the report when the workload "
    "fails, and runtimes/process/serving/scheduler.py to say why the run failed to later turns "
    "(see the task notes)",
)
def test_corrupted_run_still_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["run", "--quiet", "--http-port", "0", "--set", "faults.corrupt_blocks=3"]
    proc = subprocess.run(
        [sys.executable, "-m", "dualpath.cli.main", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "digest 0x" in proc.stderr and "0x0000000000000000 != " not in proc.stderr
    assert out.is_file(), proc.stderr
    assert json.loads(out.read_text())["integrity"]["blocks_corrupted"] >= 1
