"""Hand-made traces: every kind of bad input is a TraceError that says where and what is
accepted, and small good traces load with the documented rules (id scopes, think gaps,
gen 0, compaction)."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path
from typing import Any

import pytest

from dualpath.model.workload.traces import TraceError, infinite_cache_hit, load_trace


def _req(t: float, n_in: int, ids: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"t": t, "type": "n", "in": n_in, "out": 10, "think_time": 1.0}
    r["hash_ids"] = list(range(1, n_in // 64 + 1)) if ids is None else ids
    return r | extra


def _weka(folder: Path, name: str, reqs: list[Any], **top: Any) -> Path:
    folder.mkdir(exist_ok=True)
    body = {"id": name, "block_size": 64, "hash_id_scope": "local", "requests": reqs}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(body | top))
    return path


def _mooncake(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def _mc(ts: int, n_in: int, **extra: Any) -> dict[str, Any]:
    r = {"timestamp": ts, "input_length": n_in, "output_length": 5}
    return r | {"hash_ids": list(range(-(-n_in // 512)))} | extra


# --- WEKA: bad input -----------------------------------------------------------------------
BAD_WEKA = [
    ({"in": -5}, r"trace_0002\.json: requests\[1\]\.in: expected an integer >= 1, got -5"),
    ({"in": "700"}, r"requests\[1\]\.in: expected an integer >= 1, got '700'"),
    ({"in": 700.0}, r"requests\[1\]\.in: expected an integer"),
    ({"in": True}, r"requests\[1\]\.in: expected an integer"),
    ({"out": -1}, r"requests\[1\]\.out: expected an integer >= 0"),
    ({"out": None}, r"requests\[1\]\.out: expected an integer >= 0, got None"),
    ({"t": -1.0}, r"requests\[1\]\.t: expected a finite number >= 0"),
    ({"think_time": -2}, r"requests\[1\]\.think_time: expected a finite number >= 0"),
    ({"hash_ids": [1, 2]}, r"requests\[1\]\.hash_ids: 2 ids for in=700; expected in // "),
    ({"hash_ids": "1,2"}, r"requests\[1\]\.hash_ids: expected a list of integers"),
    ({"hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, "x"]}, r"hash_ids: expected a list of integers"),
    ({"hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, [1]]}, r"hash_ids: expected a list of integers"),
    ({"hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 1.5]}, r"found 1\.5"),
    ({"type": "x"}, r"requests\[1\]\.type: expected 'n', 's' or 'subagent', got 'x'"),
]


@pytest.mark.parametrize(("change", "message"), BAD_WEKA)
def test_weka_bad_fields_name_file_request_and_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    _weka(tmp_path, "trace_0001", [_req(0, 640)])
    _weka(tmp_path, "trace_0002", [_req(0, 640), _req(5, 700) | change])
    with pytest.raises(TraceError, match=message):
        load_trace(tmp_path)  # the first file is fine: nothing is returned anyway


@pytest.mark.parametrize("field", ["t", "in", "out", "hash_ids"])
def test_weka_missing_fields(tmp_path: Path, field: str) -> None:
    r = _req(0, 640)
    del r[field]
    _weka(tmp_path, "trace_0001", [r])
    with pytest.raises(TraceError, match=rf"requests\[0\]\.{field}: missing"):
        load_trace(tmp_path)


def test_weka_bad_subagent_request_is_named_by_its_nesting(tmp_path: Path) -> None:
    marker = {"t": 3.0, "type": "subagent", "requests": [_req(0, 640), _req(1, -1)]}
    _weka(tmp_path, "trace_0001", [_req(0, 640), marker])
    with pytest.raises(TraceError, match=r"requests\[1\]\.requests\[1\]\.in: expected"):
        load_trace(tmp_path)
    marker["requests"] = [_req(0, 640, type="subagent")]
    _weka(tmp_path, "trace_0001", [_req(0, 640), marker])
    with pytest.raises(TraceError, match=r"requests\[1\]\.requests\[0\]\.type: expected 'n'"):
        load_trace(tmp_path)
    # parent only: the sub-agent's requests are not loaded, so not judged either
    assert load_trace(tmp_path, subagents=False).requests == 1


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ({"requests": {}}, r"trace_0001\.json: requests: expected a list of requests"),
        ({"requests": []}, "the session has no requests"),
        ({"block_size": 0}, r"block_size: expected an integer >= 1"),
        ({"hash_id_scope": "team"}, r"hash_id_scope: expected 'local' or 'global'"),
        ({"id": 7}, r"id: expected a non-empty string"),
    ],
)
def test_weka_bad_session_fields(tmp_path: Path, top: dict[str, Any], message: str) -> None:
    _weka(tmp_path, "trace_0001", [_req(0, 640)], **top)
    with pytest.raises(TraceError, match=message):
        load_trace(tmp_path)


def test_weka_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "trace_0001.json").write_text('{"requests": [')
    with pytest.raises(TraceError, match=r"trace_0001\.json: not valid JSON"):
        load_trace(tmp_path)
    (tmp_path / "trace_0001.json").write_text("[1, 2]")
    with pytest.raises(TraceError, match=r"trace_0001\.json: expected a JSON object"):
        load_trace(tmp_path)
    (tmp_path / "trace_0001.json").unlink()
    (tmp_path / "trace_0001.json.xz").write_bytes(b"not xz at all")
    with pytest.raises(TraceError, match=r"trace_0001\.json\.xz: cannot read"):
        load_trace(tmp_path)


def test_weka_files_disagree_on_block_size_or_id(tmp_path: Path) -> None:
    _weka(tmp_path, "trace_0001", [_req(0, 640)])
    _weka(tmp_path, "trace_0002", [_req(0, 640, list(range(5)))], block_size=128)
    with pytest.raises(TraceError, match=r"trace_0002\.json: block_size: 128 differs from the 64"):
        load_trace(tmp_path)
    _weka(tmp_path, "trace_0002", [_req(0, 640)], id="trace_0001")
    with pytest.raises(TraceError, match=r"'trace_0001' is also the id of trace_0001\.json"):
        load_trace(tmp_path)


def test_weka_bad_paths_and_selections(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=re.escape(f"{tmp_path / 'nope'}: no such file or")):
        load_trace(tmp_path / "nope")
    with pytest.raises(TraceError, match=r"no \.json or \.json\.xz session files"):
        load_trace(tmp_path, "weka")
    _weka(tmp_path, "trace_0001", [_req(0, 640)])
    with pytest.raises(TraceError, match=r"the glob 'x\*' matches none of the 1 files"):
        load_trace(tmp_path, sessions="x*")
    with pytest.raises(TraceError, match="sessions: expected an integer >= 1 or a glob"):
        load_trace(tmp_path, sessions=0)
    with pytest.raises(TraceError, match="requests: expected an integer >= 1"):
        load_trace(tmp_path, requests=0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(TraceError, match="time_scale: expected a finite number > 0"):
            load_trace(tmp_path, time_scale=bad)


# --- WEKA: good input, the documented rules ------------------------------------------------
def test_local_ids_never_hit_across_sessions_global_ids_do(tmp_path: Path) -> None:
    for scope, hit in (("local", 0.0), ("global", 640 / 1280)):
        folder = tmp_path / scope
        _weka(folder, "trace_0001", [_req(0, 640)], hash_id_scope=scope)
        _weka(folder, "trace_0002", [_req(0, 640)], hash_id_scope=scope)
        w = load_trace(folder)
        assert infinite_cache_hit(w).token_ratio == hit
        a, b = (s.turns[0] for s in w.scripts)
        assert (a.blocks == b.blocks) == (scope == "global")
        assert (a.chain == b.chain) == (scope == "global")  # all of b is on a's chain


def test_gen_zero_compaction_and_missing_think_time(tmp_path: Path) -> None:
    reqs = [
        _req(0, 640, out=0, api_time=2.0),
        _req(10, 1280, think_time=None),  # present but null: a wrong type
    ]
    _weka(tmp_path, "trace_0001", reqs)
    with pytest.raises(TraceError, match=r"requests\[1\]\.think_time"):
        load_trace(tmp_path)
    del reqs[1]["think_time"]
    reqs.append(_req(20, 700, list(range(50, 60))))  # compaction: a shorter, new prompt
    _weka(tmp_path, "trace_0001", reqs)
    a, b, c = load_trace(tmp_path).scripts[0].turns
    assert a.gen == 1  # out 0: the emulator still generates a token
    assert b.think_s == 10 - 0 - 2.0  # no think_time: the gap after the response
    assert b.append == 1280 - (640 + 1)
    assert (c.append, c.think_s) == (1, 1.0)  # compaction: append floored at 1
    assert c.chain != b.chain


def test_small_prompts_without_blocks_get_a_chain_of_their_own(tmp_path: Path) -> None:
    _weka(tmp_path, "trace_0001", [_req(0, 10), _req(1, 20)])
    a, b = load_trace(tmp_path).scripts[0].turns
    assert a.blocks == b.blocks == () and a.chain != b.chain


# --- Mooncake --------------------------------------------------------------------------------
BAD_MOONCAKE = [
    ("{not json", r"t\.jsonl:2: not valid JSON"),
    ([1, 2], r"t\.jsonl:2: expected a JSON object"),
    (_mc(5, 600) | {"input_length": -3}, r"t\.jsonl:2: input_length: expected an integer >= 1"),
    (_mc(5, 600) | {"output_length": "5"}, r"t\.jsonl:2: output_length: expected an integer"),
    (_mc(5, 600) | {"timestamp": "5"}, r"t\.jsonl:2: timestamp: expected a finite number"),
    (_mc(5, 600) | {"hash_ids": [1]}, r"t\.jsonl:2: hash_ids: 1 ids for input_length=600; ex"),
    (_mc(5, 600) | {"hash_ids": [1, None]}, r"t\.jsonl:2: hash_ids: expected a list of int"),
]


@pytest.mark.parametrize(("line", "message"), BAD_MOONCAKE)
def test_mooncake_bad_lines_name_file_line_and_field(
    tmp_path: Path, line: Any, message: str
) -> None:
    path = _mooncake(tmp_path / "t.jsonl", [_mc(0, 600), line, _mc(9, 100)])
    with pytest.raises(TraceError, match=message):
        load_trace(path)


@pytest.mark.parametrize("field", ["timestamp", "input_length", "output_length", "hash_ids"])
def test_mooncake_missing_fields(tmp_path: Path, field: str) -> None:
    r = _mc(0, 600)
    del r[field]
    with pytest.raises(TraceError, match=rf"t\.jsonl:1: {field}: missing"):
        load_trace(_mooncake(tmp_path / "t.jsonl", [r]))


def test_mooncake_bad_files_and_options(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"t\.jsonl: no such file"):
        load_trace(tmp_path / "t.jsonl")
    with pytest.raises(TraceError, match="no requests"):
        load_trace(_mooncake(tmp_path / "e.jsonl", []))
    path = _mooncake(tmp_path / "t.jsonl", [_mc(0, 600)])
    with pytest.raises(TraceError, match="each Mooncake request is its own session"):
        load_trace(path, sessions="req-*")
    with pytest.raises(TraceError, match="is a folder"):
        load_trace(tmp_path, "mooncake")


def test_mooncake_xz_blank_lines_and_unsorted_timestamps(tmp_path: Path) -> None:
    text = "\n".join(json.dumps(r) for r in (_mc(2000, 600), _mc(1000, 1100))) + "\n\n"
    path = tmp_path / "t.jsonl.xz"
    path.write_bytes(lzma.compress(text.encode()))
    w = load_trace(path, time_scale=3.0)
    assert [(s.key, s.start_s) for s in w.scripts] == [("req-2", 3.0), ("req-1", 6.0)]
    assert w.scripts[0].turns[0].blocks == (0, 1, 2)
    first, second = (s.turns[0] for s in w.scripts)
    assert second.chain == first.chain  # req-1's two blocks are req-2's first two


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--trace", "{bad}"], r"bad\.jsonl:2: .*input_length"),
        (["--trace", "{missing}"], r"none\.jsonl: no such file"),
        (["--trace", "{bad}", "--trace-format", "nope"], r"unknown workload source 'nope'"),
        (["--trace", "{odd}"], r"cannot tell the trace format"),
    ],
)
def test_cli_names_the_file_line_and_field_in_one_line(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    """`dualpath sim --trace` with a bad trace: exit 2, one line, nothing half-run."""
    from typer.testing import CliRunner

    from dualpath.cli.main import app

    bad = tmp_path / "bad.jsonl"
    good = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "input_length": "x"}) + "\n")
    odd = tmp_path / "trace.csv"
    odd.write_text("t,in\n")
    paths = {"bad": bad, "missing": tmp_path / "none.jsonl", "odd": odd}
    argv = ["sim", "--quiet", *(a.format(**paths) for a in args)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert "Traceback" not in result.output
    assert re.search(expected, " ".join(lines)), result.output
