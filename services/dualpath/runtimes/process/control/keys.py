"""Every Redis key the control plane uses, in one place.

All keys of a run live under `dp:<run_id>:`, so several runs can share one Redis without
clashing and a run's keys can be listed with one SCAN pattern. Names that end up inside a
key (run ids, member names) are restricted to characters that are not glob metacharacters,
so SCAN MATCH patterns built from them match exactly what they say.
"""

from __future__ import annotations

import re

NAME_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
_NAME_RE = re.compile(NAME_PATTERN)

ROLES = ("scheduler", "prefill", "decode", "storage")


def validate_run_id(run_id: str) -> str:
    """Return `run_id` unchanged, or raise ValueError naming the accepted pattern."""
    return _validate("run_id", run_id)


def validate_name(field: str, value: str) -> str:
    """Validate a name that becomes part of a key (e.g. a member name)."""
    return _validate(field, value)


def _validate(field: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"{field}={value!r} is not valid: use 1-64 characters from "
            f"{NAME_PATTERN} (letters, digits, '_', '.', '-')"
        )
    return value


def validate_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"role={role!r} is not valid: use one of {', '.join(ROLES)}")
    return role


def prefix(run_id: str) -> str:
    """`dp:<run_id>:` — the namespace of one run."""
    return f"dp:{validate_run_id(run_id)}:"


def member_key(run_id: str, role: str, name: str) -> str:
    """One registry entry (a msgpack record with a TTL) per live member."""
    return f"{prefix(run_id)}member:{validate_role(role)}:{validate_name('name', name)}"


def members_pattern(run_id: str, role: str | None = None) -> str:
    """SCAN MATCH pattern for the registry entries of a run, optionally of one role."""
    if role is None:
        return f"{prefix(run_id)}member:*"
    return f"{prefix(run_id)}member:{validate_role(role)}:*"


def fork_index_key(run_id: str) -> str:
    """Hash: session -> "parent:at" for every forked chain the store holds blocks of."""
    return f"{prefix(run_id)}forks"


def block_index_key(run_id: str) -> str:
    """Hash: session id -> number of blocks of its prefix held by block storage."""
    return f"{prefix(run_id)}blocks"


def events_key(run_id: str) -> str:
    """Stream of the run's event records (field `m` = msgpack record)."""
    return f"{prefix(run_id)}events"


def epoch_key(run_id: str) -> str:
    """String: the clock reading every process of the run treats as emulated t=0."""
    return f"{prefix(run_id)}epoch"
