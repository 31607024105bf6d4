"""Link statistics as plain data, so a link charged in one process can be reported by
another (the process runtime gathers every service's links into one report): the msgpack
form of `Link.counters`."""

from __future__ import annotations

from typing import Any

from dualpath.model.links.link import Link, LinkCounters


def snapshot(link: Link) -> dict[str, Any]:
    """Counters and the per-bucket byte series of `link`, up to now (msgpack-able)."""
    c = link.counters()
    return {"bytes": c.bytes_total, "busy_s": c.busy_s, "by_vl": c.bytes_by_vl, "series": c.series}


def restore(link: Link, snap: dict[str, Any], skip_s: float = 0.0) -> None:
    """Load `snap` into an idle link (`Link.restore`)."""
    counters = LinkCounters(
        float(snap["bytes"]),
        float(snap["busy_s"]),
        {int(vl): float(b) for vl, b in snap["by_vl"].items()},
        [float(x) for x in snap["series"]],
    )
    link.restore(counters, skip_s)
