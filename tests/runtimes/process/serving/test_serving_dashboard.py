"""The front door's live dashboard (`GET /dashboard`, runtimes/process/serving/dashboard.py) in
headless
Chromium, on a real local cluster that has a token, under a steady agent load.

Chromium is required, not optional: without it this module FAILS (CI installs it:
`apt-get install -y --no-install-recommends chromium`). Set DUALPATH_DASHBOARD_PNG=PATH to
keep the screenshot (docs/img/dashboard.png is made that way, docs/monitoring.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions
from dualpath.runtimes.process.serving.dashboard import Scrape, link_rates, parse, percentiles
from tests.polling import wait_until
from tests.runtimes.process.serving.conftest import scenario

TOKEN = "dashboard-test-token-0123456789"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--force-device-scale-factor=1",
]  # fmt: skip
APT = "apt-get install -y --no-install-recommends chromium"

METRICS = """# HELP dualpath_link_bytes_total Emulated bytes moved per link and VL
# TYPE dualpath_link_bytes_total counter
dualpath_link_bytes_total{link="decode0.snic.rx",vl="2"} 1.25e+09
dualpath_link_bytes_total{link="decode0.gpu0.cnic.rx",vl="2"} 5e+08
dualpath_link_bytes_total{link="decode0.gpu1.cnic.rx",vl="0"} 2.5e+08
dualpath_link_bytes_total{link="decode0.dram",vl="2"} 9e+09
dualpath_link_busy_seconds_total{link="decode0.snic.rx"} 0.5
dualpath_emulation_lag_seconds_bucket{le="0.001",service="decode0"} 50.0
dualpath_emulation_lag_seconds_bucket{le="0.002",service="decode0"} 90.0
dualpath_emulation_lag_seconds_bucket{le="0.005",service="decode0"} 100.0
dualpath_emulation_lag_seconds_bucket{le="+Inf",service="decode0"} 100.0
dualpath_emulation_lag_seconds_count{service="decode0"} 100.0
dualpath_emulation_lag_max_seconds{service="decode0"} 0.0048
dualpath_dram_buffer_used_bytes{node="decode0"} 3.5e+08
"""


# --------------------------------------------------------------------------- pure parts


def test_parse_keeps_link_bytes_by_vl_and_the_lag() -> None:
    s = parse(METRICS, t=3.0)
    assert s.t == 3.0
    assert s.link_bytes[("decode0.snic.rx", "2")] == 1.25e9
    assert ("decode0.dram", "2") in s.link_bytes  # kept; only grouping ignores it
    # p99 interpolated in its bucket (0.002, 0.005]: 9 of its 10 samples below
    assert s.lag == {"0.99": pytest.approx(0.0047), "1.0": 0.0048}
    assert s.buffer_bytes == 3.5e8


def test_rates_are_emulated_gbps_per_node_kind_and_vl() -> None:
    prev = Scrape(1.0, {("decode0.snic.rx", "2"): 0.0, ("decode0.gpu0.cnic.rx", "2"): 5e8})
    cur = parse(METRICS, t=3.0)  # 2 emulated seconds later
    r = link_rates(prev, cur)
    assert r["decode0"]["snic_rx"] == {"2": 5.0}  # 1.25 GB in 2 s = 5 Gbps
    assert r["decode0"]["cnic_rx"] == {"2": 0.0, "0": 1.0}  # GPUs summed per node, per VL
    assert "dram" not in r["decode0"]
    restarted = Scrape(4.0, {("decode0.snic.rx", "2"): 1e6})  # counters back near 0
    assert link_rates(cur, restarted)["decode0"]["snic_rx"]["2"] == 0.0
    assert link_rates(None, cur) == {} and link_rates(cur, cur) == {}
    store = Scrape(5.0, {("storage.target3", "2"): 1.25e9, ("storage.write", "2"): 2.5e8})
    assert link_rates(Scrape(4.0), store)["storage"] == {"read": {"2": 10.0}, "write": {"2": 2.0}}


def test_percentiles() -> None:
    assert percentiles([]) is None
    p = percentiles([float(i) for i in range(100)])
    assert p == {"p50": 50.0, "p99": 99.0, "n": 100}


# --------------------------------------------------------------------------- live


def _browser() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(f"chromium is not installed; the dashboard test needs it: {APT}")
    return path


@pytest.fixture(scope="module")
def tcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Round-robin placement alternates the read path: both nodes' SNICs carry reads. With
    a token, so the scheduler's scrapes of its peers and the page's data need it."""
    _browser()  # fail before starting anything
    run_dir = tmp_path_factory.mktemp("dashboard")
    sc = scenario("policy.name=round_robin")
    cl = LocalCluster(sc, UpOptions(run_dir, http_port=0, token=TOKEN))
    try:
        cl.start()
        yield cl
    finally:
        cl.stop()


class Load:
    """Agent sessions of 6 turns each, back to back, from a thread, until stopped."""

    def __init__(self, addr: str, agents: int = 3) -> None:
        self.addr, self.agents = addr, agents
        self.codes: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:

            async def agent(a: int) -> None:
                k = 0
                while not self._stop.is_set():
                    for _ in range(6):
                        body = {"session": f"dash-{a}-{k}", "append_tokens": 4000, "gen_tokens": 16}
                        url = f"http://{self.addr}/v1/agent/turn"
                        async with http.post(url, json=body) as resp:
                            await resp.read()
                            self.codes[resp.status] = self.codes.get(resp.status, 0) + 1
                    k += 1

            await asyncio.gather(*(agent(a) for a in range(self.agents)))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _data(cl: LocalCluster, token: str | None = TOKEN) -> dict[str, Any]:
    req = urllib.request.Request(f"http://{cl.http_addr}/dashboard/data")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=5) as resp:
        body: dict[str, Any] = json.load(resp)
        return body


def _status(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


class Rows(HTMLParser):
    """The node table's rows as the page's script left them: their data-* attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-node" in a:
            self.rows[a["data-node"]] = a


def _chromium(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [_browser(), *FLAGS, f"--user-data-dir={tmp / f'profile-{name}'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_page_is_open_its_data_needs_the_token(tcluster: LocalCluster) -> None:
    base = f"http://{tcluster.http_addr}"
    assert _status(f"{base}/dashboard") == 200  # static: nothing about the run in it
    assert _status(f"{base}/dashboard/data") == 401  # the run's traffic, like /metrics
    assert _status(f"{base}/dashboard/data", "wrong-token-0123456789") == 401
    assert _status(f"{base}/dashboard/data", TOKEN) == 200
    assert _status(f"{base}/dashboard", TOKEN) == 200


def test_dashboard_renders_live_figures_in_chromium(tcluster: LocalCluster, tmp_path: Path) -> None:
    with Load(tcluster.http_addr) as load:
        deadline = time.monotonic() + 20
        while True:  # the poller needs two scrapes with traffic between them
            d = _data(tcluster)
            busy = [n for n in d["nodes"] if sum(n["snic_rx"].values()) > 0]
            if (len(busy) == 2 and len(d["history"]) >= 5) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert busy, f"no SNIC traffic on the dashboard: {d['nodes']}"
        url = f"http://{tcluster.http_addr}/dashboard#token={TOKEN}"
        dom = _chromium(tmp_path, "dom", "--virtual-time-budget=2500", "--dump-dom", url)
        png = tmp_path / "dashboard.png"
        shot = _chromium(
            tmp_path, "shot", "--window-size=1280,900", "--virtual-time-budget=2500",
            f"--screenshot={png}", url,
        )  # fmt: skip
    assert load.codes.get(200, 0) > 0, load.codes
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "No data" not in html.split('id="error"')[1][:200], "the page could not fetch its data"
    assert "emulated Gbps" in html and "dilation ×1" in html and "lag p99" in html
    rows = Rows()
    rows.feed(html)
    assert set(rows.rows) == {"prefill0", "decode0", "storage"}
    for name, row in rows.rows.items():
        assert row["data-state"] == "ok", (name, row)
    snic = {n: float(r["data-snic-rx"]) for n, r in rows.rows.items() if n != "storage"}
    assert max(snic.values()) > 0, f"no node shows SNIC throughput: {snic}"
    assert 'data-key="completed"' in html
    # the screenshot: a PNG of the window's size
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1280, 900)
    assert png.stat().st_size > 30_000  # a blank page is ~5 KB
    keep = os.environ.get("DUALPATH_DASHBOARD_PNG")
    if keep:
        shutil.copyfile(png, keep)


def test_a_dead_node_shows_as_lost_and_the_rest_keeps_updating(tcluster: LocalCluster) -> None:
    """Last in the module: it kills decode0 (nobody restarts it here)."""
    decode = next(m for m in tcluster.members if m.name == "decode0")
    os.kill(int(decode.meta["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while True:
        t0 = time.monotonic()
        d = _data(tcluster)
        took = time.monotonic() - t0
        state = {n["name"]: n["state"] for n in d["nodes"]} | {"storage": d["storage"]["state"]}
        if state["decode0"] == "lost" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert state == {"prefill0": "ok", "decode0": "lost", "storage": "ok"}, d["nodes"]
    assert took < 2.0, "a dead node must not hold up the dashboard"
    polls = d["polls"]
    wait_until(
        lambda: _data(tcluster)["polls"] > polls,
        timeout=5,
        interval=0.1,
        what="the dashboard to keep polling after a node died",
    )
