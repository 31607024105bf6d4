"""The Grafana dashboard of the compose `monitoring` profile (monitoring/grafana/): its panels
query metrics the services really export, through the provisioned data source.

Names are checked against a real scrape: a smoke cluster serves one agent turn (so labelled
counters and histograms have samples), then every service's /metrics is read. A renamed
metric fails here instead of leaving an empty panel.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from dualpath.model.config.presets import resolve
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions
from tests.paths import REPO

ROOT = REPO
GRAFANA = ROOT / "monitoring" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "dualpath.json"
# Ours carry one of these prefixes; `up` is the one Prometheus makes itself.
METRIC = re.compile(r"\b(?:dualpath_\w+|vllm:[\w:]+)")
FROM_PROMETHEUS = {"up"}
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels() for t in p["targets"]]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    sc = resolve("smoke", {"workload": {"agents": 1}}, [])
    cl = LocalCluster(sc, UpOptions(tmp_path_factory.mktemp("grafana"), http_port=0))
    try:
        cl.start()
        body = json.dumps({"session": "g", "append_tokens": 2000, "gen_tokens": 8}).encode()
        turn = urllib.request.Request(f"http://{cl.http_addr}/v1/agent/turn", data=body)
        with urllib.request.urlopen(turn, timeout=30) as resp:
            assert resp.status == 200
        names: set[str] = set()
        for m in cl.members:
            with urllib.request.urlopen(f"http://{m.admin_addr}/metrics", timeout=5) as resp:
                for line in resp.read().decode().splitlines():
                    if line and not line.startswith("#"):
                        names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
        yield names
    finally:
        cl.stop()


def test_every_metric_a_panel_queries_is_exported(scraped: set[str]) -> None:
    assert "dualpath_link_bytes_total" in scraped and "vllm:num_requests_running" in scraped
    missing = {
        (title, name)
        for title, expr in _exprs()
        for name in METRIC.findall(expr)
        if name not in scraped
    }
    assert not missing, f"panels query metrics no service exports: {sorted(missing)}"
    for title, expr in _exprs():
        # any other selector with labels names a metric that is not ours
        words = set(re.findall(r"\b[a-z_]+(?=\{)", METRIC.sub("", expr)))
        assert words <= FROM_PROMETHEUS, f"{title}: unknown metric(s) {words}"
        assert METRIC.search(expr) or words, f"{title}: {expr!r} queries no metric"


def test_the_vllm_parity_metrics_have_panels(scraped: set[str]) -> None:
    """Each metric added for vLLM parity (docs/monitoring.md) is exported and on a panel."""
    queried = {name for _, expr in _exprs() for name in METRIC.findall(expr)}
    for name in (
        "vllm:request_success_total",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_sum",
        "vllm:request_prefill_time_seconds_sum",
        "vllm:request_decode_time_seconds_sum",
        "vllm:iteration_tokens_total_bucket",
        "vllm:num_preemptions_total",
    ):
        assert name in scraped, f"{name} is not exported"
        assert name in queried, f"no panel shows {name}"


def test_queries_are_well_formed_and_use_defined_variables() -> None:
    d = _dashboard()
    defined = {v["name"] for v in d["templating"]["list"]} | GRAFANA_VARIABLES
    for title, expr in _exprs():
        for o, c in ("()", "{}", "[]"):
            assert expr.count(o) == expr.count(c), f"{title}: unbalanced {o}{c} in {expr!r}"
        assert expr.count('"') % 2 == 0, f"{title}: unbalanced quotes in {expr!r}"
        # `$1` is label_replace's capture group, not a Grafana variable
        used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", expr))
        assert used <= defined, f"{title}: undefined variable(s) {used - defined}"
        rates = re.findall(r"\brate\(|\bincrease\(", expr)
        if "_bucket" in expr or "_total" in expr:
            assert rates, f"{title}: a counter must be rated, not plotted: {expr!r}"


def test_panels_use_the_provisioned_data_source_and_fit_the_grid() -> None:
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = sources["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    d = _dashboard()
    assert d["uid"] == "dualpath" and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], str] = {}
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] >= 1 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
    for p in _panels():
        assert p["targets"], f"{p['title']}: no query"
        for ds in [p["datasource"], *(t["datasource"] for t in p["targets"])]:
            assert ds == {"type": "prometheus", "uid": source["uid"]}, p["title"]
    for var in d["templating"]["list"]:
        assert var["datasource"]["uid"] == source["uid"]


def test_the_provider_loads_the_dashboards_folder() -> None:
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/dashboards.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert sorted(p.name for p in (GRAFANA / "dashboards").iterdir()) == ["dualpath.json"]
