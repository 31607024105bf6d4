"""The scheduler's live dashboard: `GET /dashboard` (a static page) and `GET /dashboard/data`
(the JSON it draws every second); docs/monitoring.md. Queues and turns are the scheduler's
own; the links belong to the node and storage processes, so a poller scrapes their admin
/metrics (not gRPC `Stats`, which carries series that grow with the run) at most once per wall
second and turns successive byte counters into rates. It runs only while someone watches (from
a data request until `IDLE_S` after the last): the scheduler's event loop is on the
emulation's critical path, so an unwatched run must not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from dualpath.model.core.lag import bucket_quantile
from dualpath.runtimes.process.serving.auth import token_middleware

if TYPE_CHECKING:
    from dualpath.runtimes.process.serving.scheduler import SchedulerShell

log = logging.getLogger(__name__)

PERIOD_S = 1.0  # wall seconds between two polls: the page's refresh rate
DEADLINE_S = 0.8  # one scrape, wall: a late node must not delay the next poll
LOST_AFTER = 2  # scrapes in a row without an answer: one late answer on a busy host is not
IDLE_S = 60.0  # wall seconds without a /dashboard/data request before polling stops
HISTORY = 120  # polls kept for the page's charts (2 minutes)
RECENT_WALL_S = 30.0  # TTFT/TPOT: turns that finished within this many wall seconds...
RECENT_MAX = 512  # ...at most this many
MAX_SCRAPE_BYTES = 1 << 20  # a /metrics answer larger than this is not ours: drop it
DATA_PATH = "/dashboard/data"
KINDS = ("snic_rx", "snic_tx", "cnic_rx", "cnic_tx")
_BUFFER = "dualpath_dram_buffer_used_bytes"
_LAG_BUCKET = "dualpath_emulation_lag_seconds_bucket"  # a histogram (model/core/lag.py)
_LAG_MAX = "dualpath_emulation_lag_max_seconds"
_WANTED = ("dualpath_link_bytes_total{", _LAG_BUCKET + "{", _LAG_MAX + "{", _BUFFER + "{")
PAGE = (
    resources.files("dualpath.runtimes.process.frontdoor")
    .joinpath("static")
    .joinpath("dashboard.html")
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(slots=True)
class Scrape:
    """What one service's /metrics says, at emulated time `t` (when the answer arrived)."""

    t: float
    link_bytes: dict[tuple[str, str], float] = field(default_factory=dict)  # (link, vl)
    lag: dict[str, float] = field(default_factory=dict)  # quantile ("0.99") -> emulated s
    buffer_bytes: float | None = None  # DRAM buffer reserved (nodes do it, not the scheduler)


def parse(text: str, t: float) -> Scrape:
    """Only the lines the dashboard uses, without a full exposition parser: the scrape runs
    on the scheduler's event loop, and prometheus_client's parser costs ~1 ms per node."""
    out = Scrape(t)
    lag_buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if not line.startswith(_WANTED):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(_LABEL.findall(head))
        try:
            v = float(value)
        except ValueError:
            continue
        if head.startswith("dualpath_link_bytes_total"):
            out.link_bytes[(labels.get("link", ""), labels.get("vl", ""))] = v
        elif head.startswith(_BUFFER):
            out.buffer_bytes = v
        elif head.startswith(_LAG_MAX):
            out.lag["1.0"] = v
        elif "le" in labels:
            lag_buckets.append((float(labels["le"]), v))  # float() reads "+Inf" too
    if lag_buckets:  # interpolated within a bucket: never above the exact maximum
        p99 = bucket_quantile(sorted(lag_buckets), 0.99)
        out.lag["0.99"] = min(p99, out.lag.get("1.0", p99))
    return out


def link_rates(prev: Scrape | None, cur: Scrape) -> dict[str, dict[str, dict[str, float]]]:
    """Emulated Gbps per owner (`prefill0`, `storage`), kind (`snic_rx`, ..., or the storage's
    `read`/`write`) and VL, from two successive scrapes of one service."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    if prev is None or cur.t <= prev.t:
        return out
    dt = cur.t - prev.t
    for (link, vl), b in cur.link_bytes.items():
        # A restarted service counts from 0 again: its first interval is unknown, not < 0.
        gbps = round(max(b - prev.link_bytes.get((link, vl), 0.0), 0.0) * 8 / dt / 1e9, 4)
        owner, kind = _kind(link)
        if kind:
            per_vl = out.setdefault(owner, {}).setdefault(kind, {})
            per_vl[vl] = per_vl.get(vl, 0.0) + gbps
    return out


def _kind(link: str) -> tuple[str, str]:
    # Names from model/engines/hardware.py: NODE.snic.rx, NODE.gpuN.cnic.tx, storage.targetN, ...
    parts = link.split(".")
    if parts[0] == "storage" and len(parts) == 2:
        # The targets partition the aggregate read link (only one of them is charged).
        read = parts[1] == "read" or parts[1].startswith("target")
        return "storage", "read" if read else ("write" if parts[1] == "write" else "")
    kind = "_".join(parts[-2:])
    return parts[0], kind if kind in KINDS else ""


def _point(d: dict[str, Any]) -> dict[str, Any]:
    """One history entry, from a poll's data: what the page's charts show over time."""

    def per_node(kind: str) -> dict[str, float]:  # lost nodes leave a gap
        return {
            n["name"]: round(sum(n[kind].values()), 3) for n in d["nodes"] if n["state"] == "ok"
        }

    ttft = d["latency"]["ttft_s"]
    return {
        "t": d["now_s"],
        "snic_rx_gbps": per_node("snic_rx"),
        "cnic_rx_gbps": per_node("cnic_rx"),
        "read_q": {n["name"]: n["read_q"] for n in d["nodes"]},
        "ttft_p99_s": round(ttft["p99"], 5) if ttft else None,
        "lag_p99_s": round(d["lag"]["p99_s"], 5),
        "completed": d["requests"]["completed"],
    }


def percentiles(values: list[float]) -> dict[str, float] | None:
    v = sorted(values)
    return {"p50": v[len(v) // 2], "p99": v[int(0.99 * len(v))], "n": len(v)} if v else None


@dataclass(slots=True)
class Target:
    addr: str  # a service's admin address, from the registry
    last: Scrape | None = None
    rates: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    error: str = ""
    misses: int = 0  # scrapes in a row without an answer


class Dashboard:
    def __init__(self, shell: SchedulerShell, registry: CollectorRegistry) -> None:
        self.shell = shell
        self.registry = registry  # the front door's: HTTP answers by code
        self.html = _page()
        self.targets: dict[str, Target] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.polls = 0
        self._seen = 0.0  # wall time of the last data request
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._polled = asyncio.Event()  # set by every poll

    # --- polling -----------------------------------------------------------------------
    def watched(self) -> None:
        self._seen = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboard")

    async def _run(self) -> None:
        headers = {}
        if self.shell.opts.token is not None:  # peers' /metrics need the run's token
            headers["Authorization"] = f"Bearer {self.shell.opts.token}"
        conn = aiohttp.TCPConnector(limit=16)  # bounded, whatever the cluster's size
        async with aiohttp.ClientSession(connector=conn, headers=headers) as self._http:
            while time.monotonic() - self._seen < IDLE_S:
                start = time.monotonic()
                try:
                    await self.poll()
                except Exception:  # a bug here must not end the polling: say it, go on
                    log.exception("dashboard poll failed")
                await asyncio.sleep(max(0.05, PERIOD_S - (time.monotonic() - start)))
        self._http = None

    async def poll(self) -> None:
        peers = self.shell.sched.peers
        members = dict(peers.members) if peers is not None else {}
        addrs = {n: m.admin_addr for n, m in members.items() if n != "scheduler"}
        for name, addr in addrs.items():
            t = self.targets.get(name)
            if t is None or t.addr != addr:  # new, or restarted on another port
                self.targets[name] = Target(addr)
        await asyncio.gather(*(self._scrape(t) for t in self.targets.values()))
        self.polls += 1
        self.history.append(_point(self.data(history=False)))
        self._polled.set()

    async def _scrape(self, target: Target) -> None:
        assert self._http is not None
        try:
            timeout = aiohttp.ClientTimeout(total=DEADLINE_S)
            async with self._http.get(f"http://{target.addr}/metrics", timeout=timeout) as r:
                if r.status != 200:
                    raise ValueError(f"HTTP {r.status}")
                body = bytearray()
                async for chunk in r.content.iter_chunked(1 << 16):
                    body += chunk
                    if len(body) > MAX_SCRAPE_BYTES:
                        raise ValueError(f"/metrics over {MAX_SCRAPE_BYTES} bytes")
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            target.error = f"no answer ({type(exc).__name__}: {exc})"[:200]
            target.misses += 1
            if target.misses >= LOST_AFTER:
                target.rates = {}
            return
        cur = parse(body.decode("utf-8", "replace"), self.shell.clock.now())
        target.rates = link_rates(target.last, cur)
        target.last, target.error, target.misses = cur, "", 0

    # --- what the scheduler knows itself ----------------------------------------------
    def _latency(self) -> dict[str, Any]:
        clock = self.shell.clock
        since = clock.now() - RECENT_WALL_S * clock.dilation
        ttft, tpot = [], []
        for r in reversed(self.shell.sched.ctx.metrics.requests[-RECENT_MAX:]):
            if r.t_last < since:
                break
            ttft.append(r.t_first - r.arrival)
            if r.gen >= 3:
                tpot.append((r.t_last - r.t_second) / (r.gen - 2))
        return {"ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot)}

    def _http_codes(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for fam in self.registry.collect():
            if fam.name == "dualpath_http_requests":
                for s in fam.samples:
                    if s.name.endswith("_total") and s.labels["endpoint"].startswith("/v1/"):
                        out[s.labels["code"]] = out.get(s.labels["code"], 0) + s.value
        return out

    def _state(self, name: str, t: Target | None) -> dict[str, Any]:
        """`lost` if the registry says so or the last scrape got no answer; `pending` before
        the first poll reached it."""
        if name in self.shell.lost:
            return {"state": "lost", "why": "its heartbeat expired in the registry"}
        if t is not None and t.misses >= LOST_AFTER:
            return {"state": "lost", "why": t.error}
        if t is None or t.last is None:
            pending = self.polls == 0 or self.shell.sched.peers is None  # still starting
            why = t.error if t is not None and t.error else "not in the registry"
            return {"state": "pending" if pending else "lost", "why": why}
        return {"state": "ok", "why": ""}

    def data(self, history: bool = True) -> dict[str, Any]:
        sh = self.shell
        sc = sh.world.cluster.scenario
        own = sh.clock.lag
        lag = {"scheduler": {"p99_s": own.quantile(0.99), "max_s": own.quantile(1.0)}}
        # the peers' figures come from the poller's last scrape, the rest is the scheduler's
        peers = {n: self.targets.get(n) for n in [*sh.world.cluster.hw.nodes, "storage"]}
        for name, t in peers.items():
            if t is not None and t.last is not None and t.misses < LOST_AFTER:
                q = t.last.lag
                lag[name] = {"p99_s": q.get("0.99", 0.0), "max_s": q.get("1.0", 0.0)}
        nodes = []
        for name, hw in sh.world.cluster.hw.nodes.items():
            t = peers[name]
            rates = t.rates.get(name, {}) if t else {}
            buffer = t.last.buffer_bytes if t is not None and t.last is not None else None
            node = {"name": name, "role": hw.state.role, **self._state(name, t)}
            node |= {"read_q": hw.state.read_q, "buffer_bytes": buffer}
            nodes.append(node | {k: rates.get(k, {}) for k in KINDS})
        st = peers["storage"]
        storage = self._state("storage", st) | (st.rates.get("storage", {}) if st else {})
        m = sh.sched.ctx.metrics
        return {
            "now_s": round(sh.clock.now(), 3),
            "dilation": sh.clock.dilation,
            "period_s": PERIOD_S,
            "polls": self.polls,
            "model": sc.model,
            "preset_nodes": f"{sc.topology.prefill_nodes}P{sc.topology.decode_nodes}D",
            "snic_gbps": sc.hardware.snic_gbps,
            "cnic_gbps": sc.hardware.cnic_gbps * sc.topology.gpus_per_node,
            "storage_gbps": sh.world.cluster.hw.storage_read.rate * 8 / 1e9,
            "vl_names": {str(sc.vl.kv_vl): "KV", str(sc.vl.model_vl): "model"},
            "lag": {k: max(v[k] for v in lag.values()) for k in ("p99_s", "max_s")}
            | {"by_service": lag},
            "requests": {
                "inflight": len(sh.sched.inflight),
                "completed": len(m.requests),
                "failed": m.failed,
                "shed": sh.admission.shed,
                "cancelled": sh.cancelled,
                "http": self._http_codes(),
            },
            "latency": self._latency(),
            "nodes": nodes,
            "storage": storage,
            "history": list(self.history) if history else [],
        }

    # --- HTTP --------------------------------------------------------------------------
    async def page(self, _: web.Request) -> web.StreamResponse:
        if self.html is None:
            why = "dualpath/frontdoor/static/dashboard.html is not installed; /dashboard/data is"
            return web.Response(status=500, text=why)
        return web.Response(body=self.html, content_type="text/html", charset="utf-8")

    async def json(self, _: web.Request) -> web.StreamResponse:
        self.watched()
        if self.polls == 0:  # the first view: one poll (bounded) rather than "pending"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._polled.wait(), DEADLINE_S + 0.2)
        return web.json_response(self.data(), headers={"Cache-Control": "no-store"})

    async def close(self, _: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _page() -> bytes | None:
    """The page is package data (pyproject: `frontdoor/static/*.html`). An install without
    it loses the page, not the scheduler: /dashboard then says what is missing."""
    try:
        return PAGE.read_bytes()
    except OSError as exc:
        log.warning("dashboard page missing from the installed package: %s", exc)
        return None


def install(app: web.Application, shell: SchedulerShell, registry: CollectorRegistry) -> None:
    """Add the dashboard's two routes to the front door's app (before it starts).

    The page is static and open, like /healthz. Its data shows the run's traffic, as /metrics
    does, so with a token it needs the token like /metrics (docs/services.md, Security); the
    page sends the one given in its URL fragment (`/dashboard#token=...`), which browsers
    never send to the server or put in logs."""
    dash = Dashboard(shell, registry)
    app.router.add_get("/dashboard", dash.page)
    app.router.add_get(DATA_PATH, dash.json)
    if shell.opts.token is not None:
        app.middlewares.append(token_middleware(shell.opts.token, lambda p: p == DATA_PATH))
    app.on_cleanup.append(dash.close)
