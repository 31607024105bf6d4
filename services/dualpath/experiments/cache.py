"""Reports already on disk: a run's own cached report (`OUT/NAME/runs/KEY.json`) and an
identical scenario run by another experiment (`OUT/.scenarios/<hash>` index)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dualpath.experiments.base import Report, RunSpec
from dualpath.experiments.outputs import Outcome, RunRecord, atomic_write


def canon(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))


def _covers(cached: Any, wanted: Any) -> bool:
    """The cached scenario equals the wanted one on every setting it records (a setting
    added to the code since the run was cached is not a reason to re-run it)."""
    if isinstance(wanted, dict):
        if not isinstance(cached, dict):
            return False
        return all(k not in cached or _covers(cached[k], v) for k, v in wanted.items())
    return bool(cached == wanted)


def read_report(path: Path) -> Report | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "error" not in data else None


def load_cached(path: Path, spec: RunSpec) -> Report | None:
    data = read_report(path)
    wanted = canon(spec.scenario.model_dump(mode="json"))
    return data if data is not None and _covers(canon(data.get("scenario")), wanted) else None


class SharedIndex:
    """`OUT/.scenarios/<hash>`: the report path of every scenario run under OUT, so that an
    experiment reuses an identical scenario another experiment already ran (e.g. the
    ablation's Basic and DualPath runs are points of Fig. 7's grid)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / ".scenarios"

    @staticmethod
    def _id(spec: RunSpec) -> str:
        text = json.dumps(canon(spec.scenario.model_dump(mode="json")), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def publish(self, spec: RunSpec, path: Path) -> None:
        atomic_write(self.dir / self._id(spec), str(path.relative_to(self.root)))

    def find(self, spec: RunSpec) -> Report | None:
        try:
            rel = (self.dir / self._id(spec)).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        data = read_report(self.root / rel)
        wanted = canon(spec.scenario.model_dump(mode="json"))
        return data if data is not None and canon(data.get("scenario")) == wanted else None


def reuse(spec: RunSpec, runs_dir: Path, index: SharedIndex, o: Outcome) -> bool:
    """Record an earlier report of this run (ours, or another experiment's identical
    scenario) instead of running it again."""
    path = runs_dir / f"{spec.key}.json"
    report = load_cached(path, spec)
    if report is not None:
        index.publish(spec, path)
        o.records[spec.key] = RunRecord(spec, report, "cached")
        return True
    report = index.find(spec)
    if report is None:
        return False
    atomic_write(path, json.dumps(report, indent=1))
    o.records[spec.key] = RunRecord(spec, report, "shared")
    return True
