"""docs/report.schema.json: a valid draft 2020-12 schema that every kind of report matches,
that refuses what no report has, and whose every key docs/report.md documents."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario
from dualpath.report import schema as report_schema
from dualpath.report.schema import (
    VALIDATE_ENV,
    ReportSchemaError,
    check_report,
    load_schema,
    validate_report,
)
from dualpath.runtimes.virtual.sim import simulate
from tests.paths import REPO, TRACES

DOC = (REPO / "docs" / "report.md").read_text(encoding="utf-8")
ONLINE = {"mode": "online"}
SHORT_ONLINE = {"aps": 0.5, "window_s": 30, "lookback_s": 60, "max_duration_s": 60}

WEKA = {"source": "weka", "trace": str(TRACES / "weka_claude_code"), "trace_sessions": 4}
MOONCAKE = {
    "source": "mooncake",
    "trace": str(TRACES / "mooncake_synthetic" / "synthetic_trace.jsonl"),
    "replay": "open-loop",
    "trace_sessions": 4,
}

# name -> (settings over the smoke preset, what the report must show for the case to count)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "offline": ({"workload": {"agents": 4}}, "jct_floor"),
    "online": ({"workload": ONLINE, "online": SHORT_ONLINE}, "online"),
    "fault": ({"faults": {"schedule": ["degrade:prefill0.snic=2@1+5"]}}, "faults.events"),
    "split": ({"policy": {"name": "dualpath-split"}}, "read_path.split"),
    "weka": ({"workload": WEKA}, "workload.trace_hit_rate"),
    "mooncake-open-loop": ({"workload": MOONCAKE}, "workload.trace_hit_rate"),
}


def _pick(report: dict[str, Any], dotted: str) -> Any:
    value: Any = report
    for step in dotted.split("."):
        value = value[step]
    return value


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return load_schema()


@pytest.fixture(scope="module")
def offline() -> dict[str, Any]:
    return simulate(resolve("smoke", CASES["offline"][0], []))


def test_the_schema_is_a_valid_2020_12_schema_with_every_key_described(
    schema: dict[str, Any],
) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    for path, sub in _keys(schema):
        assert sub.get("description"), f"{path}: no description"
        assert {"type", "$ref", "enum", "const"} & set(sub), f"{path}: no type"


@pytest.mark.parametrize("case", list(CASES))
def test_every_kind_of_sim_report_validates(case: str) -> None:
    sets, shows = CASES[case]
    report = simulate(resolve("smoke", sets, []))
    shown = _pick(report, shows)  # KeyError: the report is not the case it claims to be
    assert shown not in (None, [], {}), f"the {case} report has no {shows}"
    validate_report(report)


def test_an_open_loop_report_has_no_last_agent_and_still_validates() -> None:
    sets = CASES["mooncake-open-loop"][0]
    report = simulate(resolve("smoke", sets, []))
    assert report["jct_floor"]["last_agent"] is None
    validate_report(report)


NODE = "$.dram.per_node.prefill0"


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (lambda r: r["runtime"].update(lag_median_s=0.0), "$.runtime", "lag_median_s"),
        (lambda r: r["gpu"].update(forwards="12"), "$.gpu.forwards", "integer"),
        (lambda r: r["dram"]["per_node"]["prefill0"].update(x=1), NODE, "'x' was unexpected"),
        (lambda r: r["runtime"].update(kind="processes"), "$.runtime.kind", "processes"),
        (lambda r: r["runtime"].update(lag_max_s=0.1), "$.runtime.lag_max_s", "kind of report"),
        (lambda r: r.update(history={}), "$.history", "kind of report"),
        (lambda r: r.pop("jct_floor"), "$", "'jct_floor' is a required property"),
        (lambda r: r.update(mode="online"), "$.jct_floor_s", "kind of report"),
        (lambda r: r["latency"]["ttft_s"].pop("quantiles"), "$.latency.ttft_s", "quantiles"),
        (lambda r: r["read_path"].update(both=1), "$.read_path", "'both' was unexpected"),
    ],
)
def test_an_unknown_key_or_a_wrong_value_fails_naming_its_path(
    offline: dict[str, Any], change: Any, path: str, words: str
) -> None:
    report = copy.deepcopy(offline)
    change(report)
    with pytest.raises(ReportSchemaError, match=re.escape(words)) as info:
        validate_report(report)
    assert info.value.path == path
    assert str(info.value).startswith(f"report {path}: ")
    assert "docs/report.md" in str(info.value)  # where the fix goes


def test_a_process_report_needs_its_runtime_keys(offline: dict[str, Any]) -> None:
    report = copy.deepcopy(offline)
    report["runtime"].update(kind="process", dilation=4.0, flows=None)
    with pytest.raises(ReportSchemaError) as info:
        validate_report(report)
    assert info.value.path in {"$", "$.runtime"}
    assert "required property" in str(info.value)


def test_the_runtimes_check_their_reports_when_asked(
    offline: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/conftest.py sets the variable; a schema without one key the report has makes
    simulate() itself fail, naming the key."""
    monkeypatch.setenv(VALIDATE_ENV, "1")
    stricter = load_schema()
    del stricter["properties"]["gpu"]["properties"]["attention_balance_all_run"]
    monkeypatch.setattr(report_schema, "load_schema", lambda: stricter)
    with pytest.raises(ReportSchemaError, match="attention_balance_all_run") as info:
        simulate(resolve("smoke", CASES["offline"][0], []))
    assert info.value.path == "$.gpu"
    monkeypatch.setenv(VALIDATE_ENV, "0")
    check_report({"not": "a report"})  # off: nothing is checked


def test_the_runtime_does_not_import_jsonschema() -> None:
    code = (
        "import sys, dualpath.cli.main, dualpath.runtimes.virtual.sim, "
        "dualpath.runtimes.process.launcher.run, "
        "dualpath.report.schema; print('jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_scenario_sections_the_schema_requires_exist(schema: dict[str, Any]) -> None:
    required = schema["properties"]["scenario"]["required"]
    assert set(required) <= set(Scenario.model_fields)


# --- docs/report.md documents the schema -------------------------------------------------------
def _keys(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, subschema) of every named key, through $defs, maps and conditionals."""
    if not isinstance(node, dict):
        return
    for name, sub in node.get("properties", {}).items():
        if isinstance(sub, dict) and sub:
            yield f"{path}.{name}", sub
            yield from _keys(sub, f"{path}.{name}")
    for word in ("additionalProperties", "items"):
        yield from _keys(node.get(word), f"{path}.*")
    for name, sub in node.get("$defs", {}).items():
        yield from _keys(sub, f"$defs.{name}")


def _table(heading: str | None) -> dict[str, str]:
    """First-column key -> row of the first table after `heading` (None: the first table)."""
    text = DOC if heading is None else DOC.split(f"\n{heading}\n", 1)[1]
    rows: dict[str, str] = {}
    for line in text.split("\n| --- |", 1)[1].split("\n\n", 1)[0].splitlines()[1:]:
        first = line.split("|")[1]
        for key in re.findall(r"`([a-z_0-9]+)`", first):
            rows[key] = line
    return rows


def _vocabulary(schema: dict[str, Any]) -> set[str]:
    """Every key name, enum value and const of the schema."""
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            words.update(node.get("properties", {}))
            words.update(str(v) for v in node.get("enum", []))
            if "const" in node:
                words.add(str(node["const"]))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return words


def test_every_key_of_the_schema_is_in_the_docs(schema: dict[str, Any]) -> None:
    missing = sorted({p for p, _ in _keys(schema) if f"`{p.rsplit('.', 1)[1]}`" not in DOC})
    assert not missing, f"docs/report.md does not name {missing}"


def test_the_docs_table_has_a_row_per_top_level_key_naming_its_keys(
    schema: dict[str, Any],
) -> None:
    rows = _table(None)
    assert set(rows) == set(schema["properties"])
    for key, row in rows.items():
        sub = schema["properties"][key]
        for child in sub.get("properties", {}):
            assert f"`{child}`" in row, f"the docs' `{key}` row does not name `{child}`"


def test_the_docs_runtime_table_is_the_schemas_runtime(schema: dict[str, Any]) -> None:
    assert set(_table("## Runtime")) == set(schema["properties"]["runtime"]["properties"])


def test_every_key_the_docs_tables_name_is_in_the_schema(schema: dict[str, Any]) -> None:
    """Vice versa: each identifier in backticks in the key tables, the presence list and the
    runtime table is a key, an enum value or a const of the schema (dotted: part by part)."""
    known = _vocabulary(schema)
    text = DOC.split("\n| key | meaning |\n", 1)[1].split("\n## JCT floor\n", 1)[0]
    unknown: set[str] = set()
    for token in re.findall(r"`([^`]+)`", text):
        if re.search(r"[ /=≤×-]", token):
            continue  # a command, a file or a formula
        parts = [p.removesuffix("[]") for p in token.split(".") if p != "*"]
        if all(re.fullmatch(r"[a-z][a-z0-9_]*", p) for p in parts):
            unknown.update(p for p in parts if p not in known)
    assert not unknown, f"docs/report.md names keys the schema lacks: {sorted(unknown)}"


def test_a_report_survives_the_json_round_trip(offline: dict[str, Any]) -> None:
    """The check validates the report as written: no tuple, no NaN, the same dict back."""
    assert json.loads(json.dumps(offline)) == offline
