"""The checks of compose-test.sh on what the engine, the API and the reports answered.

    python scripts/containers/checks.py healthy "SERVICE ..." < `docker compose ps --format json`
    python scripts/containers/checks.py chat ANSWER_JSON MAX_TOKENS
    python scripts/containers/checks.py load out/compose/load/progress.json
    python scripts/containers/checks.py report out/compose/report.json
    python scripts/containers/checks.py targets out/compose/targets.json monitoring/prometheus.yml

Each prints one line per fact and exits non-zero with the reason when the check fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


def _json(path: str) -> Any:
    return json.loads(Path(path).read_text())


def healthy(services: str) -> str | None:
    """Every default service running and healthy (`ps --format json`: one object a line,
    or one array, depending on the Compose version)."""
    rows: list[dict[str, Any]] = []
    for line in sys.stdin:
        if line.strip():
            item = json.loads(line)
            rows += item if isinstance(item, list) else [item]
    state = {r["Service"]: (r["State"], r.get("Health", "")) for r in rows}
    expected = sorted(services.split())
    for name in expected:
        print(f"  {name:10} {'/'.join(state.get(name, ('absent', '')))}")
    bad = [n for n in expected if state.get(n) != ("running", "healthy")]
    return f"not running and healthy: {', '.join(bad)}" if bad else None


def chat(answer: str, max_tokens: str) -> str | None:
    """An OpenAI chat completion with text and the requested number of tokens."""
    a = json.loads(answer)
    text = a["choices"][0]["message"]["content"]
    usage = a["usage"]
    ttft = a.get("dualpath", {}).get("ttft_s", float("nan"))
    print(f"  {usage['completion_tokens']} tokens, emulated TTFT {ttft:.3f} s: {text[:60]!r}")
    if not text or usage["completion_tokens"] != int(max_tokens):
        return f"not the completion asked for: {answer[:500]}"
    return None


def load(progress: str) -> str | None:
    """Locust's progress record: turns were served."""
    p = _json(progress)
    print(
        f"  sessions started {p['sessions_started']}, turns done {p['turns_done']}, "
        f"failed requests {p['failures']}"
    )
    return "Locust served no turn" if p["turns_done"] == 0 else None


def report(path: str) -> str | None:
    """The cluster's report (cluster_report.py): no block lost or corrupted."""
    r = _json(path)
    i = r["integrity"]
    print(
        f"  turns {r['runtime'].get('turns', '?')}, blocks read {i['blocks_read']}, "
        f"persisted {i['blocks_persisted']}, lost {i['blocks_lost']}, "
        f"corrupted {i['blocks_corrupted']}"
    )
    if i["blocks_lost"] or i["blocks_corrupted"]:
        return f"{i['blocks_lost']} blocks lost, {i['blocks_corrupted']} corrupted"
    return None


def targets(path: str, config: str) -> str | None:
    """Every target of the Prometheus config is scraped and up."""
    conf = yaml.safe_load(Path(config).read_text())
    want = {
        t for job in conf["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    active = _json(path)["data"]["activeTargets"]
    got = {t["labels"]["instance"]: (t["health"], t.get("lastError", "")) for t in active}
    for name in sorted(want):
        health, error = got.get(name, ("absent", ""))
        print(f"  {name:16} {health} {error}".rstrip())
    down = sorted(t for t in want if got.get(t, ("absent",))[0] != "up")
    return f"targets not up: {', '.join(down)}" if down else None


CHECKS: dict[str, Callable[..., str | None]] = {
    "healthy": healthy,
    "chat": chat,
    "load": load,
    "report": report,
    "targets": targets,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in CHECKS:
        print(f"usage: checks.py {{{','.join(CHECKS)}}} ARGS...", file=sys.stderr)
        return 2
    problem = CHECKS[argv[0]](*argv[1:])
    if problem is not None:
        print(f"  check {argv[0]}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
