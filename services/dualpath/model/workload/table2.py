"""The paper's Table 2 (trace statistics per MaxLen) and the `--max-len` flag.

Only the three MaxLen values the paper measured have a trace profile. A requested max_len
maps to the row within +-10% (so 30000 or "33k" still mean the 32K dataset, cut at the
requested length); anything else is rejected rather than extrapolated, because the three
rows come from three different RL runs and do not lie on one curve (per-turn sizes shrink
as MaxLen grows) that could be interpolated honestly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

K = 1024
ROW_TOLERANCE = 0.10  # relative distance from a row's MaxLen still mapped to that row
_FLAG = "--max-len"
_FORM = re.compile(r"^\s*(\d+)\s*([kK]?)\s*$")


@dataclass(frozen=True, slots=True)
class Table2Row:
    """Averages over the 500 trajectories of one paper dataset (paper Table 2)."""

    max_len: int
    turns: float  # turns per trajectory
    append: float  # appended tokens per turn
    gen: float  # generated tokens per turn
    total: float  # tokens per trajectory
    context: float  # context tokens per request (KV already in the session)
    hit_rate: float | None = None  # only stated for 64K (paper section 3)

    @property
    def label(self) -> str:
        return f"{self.max_len // K}k"


TABLE2: tuple[Table2Row, ...] = (
    Table2Row(32 * K, 60, 608, 148, 28_639, 17_183),
    Table2Row(48 * K, 106, 474, 172, 42_607, 25_120),
    Table2Row(64 * K, 157, 429, 176, 55_958, 32_721, hit_rate=0.987),
)


def _accepted() -> str:
    return ", ".join(row.label for row in TABLE2)


def parse_max_len(text: str | int) -> int:
    """Parse `--max-len`: "64k", "64K" or "65536" (k = 1024 tokens).

    The value must map to a Table 2 row (see `table2_row`); a ValueError names the flag and
    the accepted forms otherwise.
    """
    if isinstance(text, int):
        value = text
    else:
        m = _FORM.match(text)
        if m is None:
            raise ValueError(
                f"{_FLAG}: cannot parse {text!r}; write a token count like 32k, 48K, 64k "
                f"or 65536 (k = 1024)"
            )
        value = int(m.group(1)) * (K if m.group(2) else 1)
    table2_row(value)
    return value


def table2_row(max_len: int) -> Table2Row:
    """The Table 2 row whose MaxLen is within ROW_TOLERANCE of `max_len`."""
    if max_len > 0:
        row = min(TABLE2, key=lambda r: abs(r.max_len - max_len))
        if abs(row.max_len - max_len) <= ROW_TOLERANCE * row.max_len:
            return row
    raise ValueError(
        f"{_FLAG}: no paper trace profile for {max_len} tokens; the paper's datasets are "
        f"{_accepted()} (each accepts +-{ROW_TOLERANCE:.0%}), written e.g. 64k or 65536"
    )
