"""The checks of compose-test.sh on what the engine, the API and the reports answered.

    python scripts/containers/checks.py healthy "SERVICE ..." < `docker compose ps --format json`
    python scripts/containers/checks.py chat ANSWER_JSON MAX_TOKENS
    python scripts/containers/checks.py load out/compose/load/progress.json
    python scripts/containers/checks.py report out/compose/report.json
    python scripts/containers/checks.py targets out/compose/targets.json monitoring/prometheus.yml
    python scripts/containers/checks.py node SERVICE < `dualpath cluster status --json`
    python scripts/containers/checks.py healthz < the scheduler's /healthz answer
    python scripts/containers/checks.py served-since CLIENTS_JSONL UNIX_S
    python scripts/containers/checks.py faults CLIENTS_JSONL WINDOWS_TSV LIMIT_S [SCHEDULE_JSON]

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


def sim_report(path: str) -> str | None:
    """The `sim` profile's one-shot report: turns served on virtual time, no block lost."""
    r = _json(path)
    i, done = r["integrity"], r["requests"]["completed"]
    print(
        f"  sim profile: {r['scenario']['name']}, JCT {r['jct_s']:.1f} emulated s, {done} turns, "
        f"{r['runtime']['wall_s']:.1f} s wall, blocks lost {i['blocks_lost']}, "
        f"corrupted {i['blocks_corrupted']}"
    )
    if not done:
        return "the sim profile's report has no completed turn"
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


def node(service: str) -> str | None:
    """`dualpath cluster status --json`: the service running, healthy, on its network."""
    rows = {r["service"]: r for r in json.load(sys.stdin)}
    r = rows.get(service)
    if r is None:
        return f"no service {service}"
    if (r["state"], r["health"], r["partitioned"]) != ("running", "healthy", False):
        return f"{service}: {r['state']}, {r['health']}, partitioned {r['partitioned']}"
    return None


def healthz() -> str | None:
    """The scheduler's /healthz: status ok, no node lost."""
    h = json.load(sys.stdin)
    if h.get("status") != "ok" or h.get("lost"):
        return f"status {h.get('status')}, lost {h.get('lost')}, reasons {h.get('reasons')}"
    return None


def served_since(clients: str, since: str) -> str | None:
    """A turn that started at or after SINCE (Unix s) was served (quiet: polled)."""
    from dualpath.deploy.containers.clients import read

    t = float(since)
    ok = any(r.status == "200" and r.t0 >= t for r in read(Path(clients)))
    return None if ok else "no turn served since then"


def _windows(path: str, schedules: list[str]) -> list[tuple[str, float, float, float]]:
    """Fault windows: `NAME<TAB>SINCE<TAB>START<TAB>END` rows (SINCE: when the command that
    started it was run), plus the applied/cleared pairs of `dualpath cluster faults --json`
    logs (stamped as the engine was called)."""
    rows: list[tuple[str, float, float, float]] = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            name, since, first, end = line.split("\t")
            rows.append((name, float(since), float(first), float(end)))
    for sched in schedules:
        begun: dict[str, float] = {}
        for e in _json(sched):
            if e["event"] == "applied":
                begun[e["fault"]] = float(e["wall"])
            elif e["fault"] in begun:
                start = begun.pop(e["fault"])
                rows.append((str(e["fault"]), start, start, float(e["wall"])))
    return sorted(rows, key=lambda r: r[1])


def faults(clients: str, windows: str, limit_s: str, *schedules: str) -> str | None:
    """What the clients saw around each fault; every fault recovered within LIMIT_S (a
    turn that started after the fault's end served), no turn without an answer."""
    from dualpath.deploy.containers.clients import Window, read, summarize

    turns = read(Path(clients))
    rows = _windows(windows, list(schedules))
    ends = [r[1] for r in rows[1:]] + [max((t.t1 for t in turns), default=0.0) + 1]
    spans = [Window(*row, until) for row, until in zip(rows, ends, strict=True)]
    summary = summarize(turns, spans)
    Path(clients).with_name("faults.json").write_text(json.dumps(summary, indent=1))
    cols = ("200", "429", "503", "timeout", "error")
    print(f"  {'fault':28} {'held s':>6} {'turns':>5} " + " ".join(f"{c:>7}" for c in cols)
          + f" {'other':>5} {'longest s':>9} {'recovered s':>11}")  # fmt: skip
    for w in summary["windows"]:
        st = w["statuses"]
        other = sum(v for k, v in st.items() if k not in cols)
        rec = "never" if w["recovered_s"] is None else f"{w['recovered_s']:.1f}"
        print(f"  {w['name']:28} {w['fault_s']:6.1f} {w['turns']:5} "
              + " ".join(f"{st.get(c, 0):7}" for c in cols)
              + f" {other:5} {w['longest_s']:9.2f} {rec:>11}")  # fmt: skip
        for reason, n in w["reasons"].items():
            print(f"      {n} x {reason[:110]}")
    print(f"  all turns: {summary['turns']}, {summary['statuses']}")
    slow = [w["name"] for w in summary["windows"]
            if w["recovered_s"] is None or w["recovered_s"] > float(limit_s)]  # fmt: skip
    if slow:
        return f"no turn served within {limit_s} s after: {', '.join(slow)}"
    hung = {k: summary["statuses"].get(k, 0) for k in ("timeout", "error")}
    if any(hung.values()):
        return f"turns without an HTTP answer: {hung} ({clients})"
    return None


CHECKS: dict[str, Callable[..., str | None]] = {
    "healthy": healthy,
    "chat": chat,
    "load": load,
    "report": report,
    "sim-report": sim_report,
    "targets": targets,
    "node": node,
    "healthz": healthz,
    "served-since": served_since,
    "faults": faults,
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
