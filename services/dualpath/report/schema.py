"""The report's published JSON Schema (`docs/report.schema.json`) and its check.

`jsonschema` is a dev dependency, imported only when a report is checked: the runtimes never
need it. With `DUALPATH_VALIDATE_REPORTS=1` (set for the whole test session by
tests/conftest.py, inherited by every subprocess a test starts) each runtime checks the report
it built before handing it to a writer (`runtimes/virtual/sim.py` `simulate`,
`runtimes/process/launcher/run.py`
`finish_run`), so a key that is added without being documented fails the tests at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

VALIDATE_ENV = "DUALPATH_VALIDATE_REPORTS"
# The schema lives with the docs (published beside docs/report.md), not in the package: the
# check runs from a source checkout (tests, development), never in a deployed service.
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "report.schema.json"
_FIX = "see docs/report.md; a new or changed key goes into it and into docs/report.schema.json"


class ReportSchemaError(ValueError):
    """A report does not match docs/report.schema.json; `path` is the JSON path ($.a.b)."""

    def __init__(self, path: str, message: str, others: int = 0) -> None:
        more = f" (and {others} more)" if others else ""
        super().__init__(f"report {path}: {message}{more} ({_FIX})")
        self.path = path


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no report schema (it is in a source checkout's docs/); unset "
            f"{VALIDATE_ENV} to run without checking reports"
        ) from None
    return schema


def validate_report(report: dict[str, Any], schema: dict[str, Any] | None = None) -> None:
    """Raise ReportSchemaError naming the first offending JSON path, if `report` (as it
    would be written: a JSON round trip) does not match the schema."""
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    data = json.loads(json.dumps(report))
    validator = Draft202012Validator(schema if schema is not None else load_schema())
    errors = list(validator.iter_errors(data))
    if not errors:
        return
    err = best_match(errors)
    path, message = err.json_path, err.message
    if err.validator is None:  # a `false` subschema: a key present where it must not be
        key = _forbidden_key(validator.schema, list(err.absolute_schema_path), err.instance,
                             _at(data, list(err.absolute_path)))  # fmt: skip
        path = f"{path}.{key}"
        message = "not in this kind of report (it depends on runtime.kind and mode)"
    raise ReportSchemaError(path, message, len(errors) - 1)


def _at(data: Any, path: list[str | int]) -> Any:
    for step in path:
        data = data[step]
    return data


def _forbidden_key(schema: Any, schema_path: list[str | int], value: Any, parent: Any) -> str:
    """The key a `false` subschema refused. jsonschema reports such an error at the parent
    object with the schema path ending at `properties`, without the key itself."""
    props = _at(schema, schema_path)
    if not isinstance(props, dict) or not isinstance(parent, dict):
        return "?"
    keys = [k for k, sub in props.items() if sub is False and k in parent]
    return next((k for k in keys if parent[k] == value), keys[0] if keys else "?")


def check_report(report: dict[str, Any]) -> None:
    """validate_report when $DUALPATH_VALIDATE_REPORTS is set (to anything but 0/empty)."""
    if os.environ.get(VALIDATE_ENV, "") not in ("", "0"):
        validate_report(report)
