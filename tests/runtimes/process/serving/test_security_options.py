"""Token loading and the loopback rule of `dualpath serve` (runtimes/process/serving/options.py),
and the
password redaction of Redis URLs in messages (runtimes/process/control/resilience.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dualpath.runtimes.process.control.resilience import redact_url
from dualpath.runtimes.process.serving.options import (
    TOKEN_ENV,
    ServeOptions,
    is_loopback,
    load_token,
)

TOKEN = "0123456789abcdef"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
     ("storage", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_token_from_env_or_file(tmp_path: Path) -> None:
    assert load_token(None, {}) is None
    assert load_token(None, {TOKEN_ENV: ""}) is None  # empty: no token (launcher uses this)
    assert load_token(None, {TOKEN_ENV: TOKEN}) == TOKEN
    f = tmp_path / "token"
    f.write_text(f"  {TOKEN}x\n")
    assert load_token(f, {TOKEN_ENV: TOKEN}) == TOKEN + "x"  # the file wins


@pytest.mark.parametrize("bad", ["short", "a" * 10 + " " + "b" * 10, "é" * 20])
def test_bad_tokens_are_one_line_errors(bad: str) -> None:
    with pytest.raises(ValueError, match=TOKEN_ENV) as err:
        load_token(None, {TOKEN_ENV: bad})
    assert "\n" not in str(err.value)


def test_unreadable_token_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--token-file"):
        load_token(tmp_path / "missing", {})


def test_non_loopback_bind_needs_a_token_or_insecure() -> None:
    url = "redis://127.0.0.1:6379/0"
    ServeOptions(role="storage", redis_url=url)  # loopback default: no token needed
    with pytest.raises(ValueError, match="--insecure"):
        ServeOptions(role="storage", redis_url=url, host="0.0.0.0")
    ServeOptions(role="storage", redis_url=url, host="0.0.0.0", insecure=True)
    opts = ServeOptions(role="storage", redis_url=url, host="0.0.0.0", token=TOKEN)
    assert TOKEN not in repr(opts)


def test_redact_url() -> None:
    assert redact_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redact_url("redis://u:s3cret@h:1/0") == "redis://u:***@h:1/0"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
