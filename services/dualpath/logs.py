"""Structured logs of one process: one line per lifecycle event, per turn and per error.

Every service configures this once in its entry point (`dualpath serve`); the launcher of
`dualpath up`/`run` sends each service's stderr to `RUN_DIR/logs/NAME.log`. Two formats:

* `text` (default), for people: `TS LEVEL SERVICE EVENT key=value ...`;
* `json`, one object per line for log shippers: keys `ts`, `level`, `service`, `event`,
  then the event's own fields (`request_id`, `node`, `error`, ...).

Code states an event with `event(log, "turn_done", request_id=7, path="pe")`. A plain
`log.warning("...")` from code that does not (or from a library) still becomes one line:
its text as written, or in JSON event `log` with the text under `msg`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
FORMAT_ENV = "DUALPATH_LOG_FORMAT"
LEVEL_ENV = "DUALPATH_LOG_LEVEL"
# The LogRecord attribute that carries an event's fields (one attribute: no clash with the
# record's own attributes, whatever the fields are called).
_FIELDS = "dualpath_fields"
_PLAIN_EVENT = "log"  # a record logged without `event()`


def resolve(
    fmt: str | None, level: str | None, env: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The format and level to use: a flag wins over $DUALPATH_LOG_FORMAT /
    $DUALPATH_LOG_LEVEL, else text at info. ValueError names the flag or variable."""
    env = os.environ if env is None else env
    out = []
    for value, var, flag, allowed, default in (
        (fmt, FORMAT_ENV, "--log-format", FORMATS, "text"),
        (level, LEVEL_ENV, "--log-level", LEVELS, "info"),
    ):
        where = flag if value is not None else f"${var}"
        chosen = (value if value is not None else env.get(var, "")).strip().lower() or default
        if chosen not in allowed:
            raise ValueError(f"{where} {chosen!r}: expected one of {', '.join(allowed)}")
        out.append(chosen)
    return out[0], out[1]


def event(
    log: logging.Logger,
    name: str,
    level: int = logging.INFO,
    *,
    exc: BaseException | None = None,
    trace: bool = False,
    **fields: Any,
) -> None:
    """Log event `name` with its fields. `exc`: the error, logged as `error` (one line);
    `trace`: also its traceback (for bugs; an expected failure's message says enough)."""
    if not log.isEnabledFor(level):
        return
    if exc is not None:
        fields.setdefault("error", describe(exc))
    exc_info = exc if trace and exc is not None else None
    log.log(level, name, exc_info=exc_info, extra={_FIELDS: fields})


def describe(exc: BaseException) -> str:
    """`Type: message`, one line (a gRPC error's details can hold newlines)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _timestamp(record: logging.LogRecord) -> str:
    t = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _parts(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """The event name and its fields; a plain record's text goes under `msg`."""
    fields = getattr(record, _FIELDS, None)
    if isinstance(fields, dict):
        return str(record.msg), dict(fields)
    return _PLAIN_EVENT, {"msg": record.getMessage(), "logger": record.name}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        name, fields = _parts(record)
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "service": self.service,
            "event": name,
        }
        out.update((k, _json_safe(v)) for k, v in fields.items() if k not in out)
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        # default=str: a field that is no JSON type (a Path, an enum) still logs
        return json.dumps(out, default=str)


def _json_safe(v: Any) -> Any:
    """NaN and infinities are no JSON: they log as the strings "nan", "inf"."""
    return str(v) if isinstance(v, float) and not math.isfinite(v) else v


class TextFormatter(logging.Formatter):
    """`TS LEVEL SERVICE EVENT k=v ...`; a value with spaces or quotes is JSON-quoted. A
    plain log call's line is `TS LEVEL SERVICE TEXT`."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_timestamp(record)} {record.levelname} {self.service}"
        fields = getattr(record, _FIELDS, None)
        if isinstance(fields, dict):
            line = " ".join(
                [head, str(record.msg), *(f"{k}={_value(v)}" for k, v in fields.items())]
            )
        else:  # a plain log call: its own text, as written
            line = f"{head} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    text = str(v)
    if text and not any(c.isspace() or c in '"=' for c in text):
        return text
    return json.dumps(text)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass


def configure(service: str, fmt: str = "text", level: str = "info") -> logging.Handler:
    """Send every log record of this process to stderr as `fmt` lines naming `service`, at
    `level` and above. Calling it again replaces its own handler (not anyone else's)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter(service))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    logging.captureWarnings(True)  # a library's warning is one log line too, not raw text
    return handler
