"""Link statistics as plain data, so a link charged in one process can be reported by
another (the process runtime gathers every service's links into one report)."""

from __future__ import annotations

from array import array
from typing import Any

from dualpath.links.link import Link


def snapshot(link: Link) -> dict[str, Any]:
    """Counters and the per-bucket byte series of `link`, up to now (msgpack-able)."""
    return {
        "bytes": link.bytes_total,
        "busy_s": link.busy_s,
        "by_vl": {int(vl): b for vl, b in link.bytes_by_vl.items()},
        "series": link.series() if link._series is not None else [],
    }


def restore(link: Link, snap: dict[str, Any], skip_s: float = 0.0) -> None:
    """Load `snap` into an idle link, dropping the first `skip_s` emulated seconds of its
    series (the process runtime's clocks start before the workload does)."""
    if link.members:
        raise ValueError(f"link {link.name!r} has flows: restore only into an idle link")
    link._bytes = float(snap["bytes"])
    link._busy_s = float(snap["busy_s"])
    link._by_vl = {int(vl): float(b) for vl, b in snap["by_vl"].items()}
    if link._series is not None and link._bucket_s:
        skip = int(skip_s / link._bucket_s)
        link._series = array("d", [float(x) for x in snap["series"][skip:]])
