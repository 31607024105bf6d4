"""Agent sessions against the cluster's API, each turn recorded as its client saw it.

    python -m dualpath.deploy.containers.clients --url http://127.0.0.1:8000 --clients 4 \\
        --duration 300 --out out/compose/faults/clients.jsonl     (SIGTERM ends it early)

The compose test runs this while it pauses and partitions nodes. Each client runs one
agent session at a time (POST /v1/agent/turn, append form: the server keeps the history),
turns back to back. After any answer other than 200 the client starts a new session: the
old one may still have a turn running on the server (a second one would be 409) or be
lost. One JSON line per turn: client, session, turn, t0 (wall clock, Unix s), latency_s,
status ("200", "429", "503", ..., "timeout": no answer within --timeout, "error": no HTTP
answer at all), reason. `summarize` turns the lines and the fault windows into figures.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

APPEND_TOKENS = 1000
GEN_TOKENS = 32
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")  # (not the 0 of decode0: no word boundary)
SESSION_TURNS = 16  # then a fresh session: contexts stay small, the test stays fast


@dataclass(frozen=True, slots=True)
class Turn:
    client: int
    session: str
    turn: int
    t0: float
    latency_s: float
    status: str
    reason: str = ""

    @property
    def t1(self) -> float:
        return self.t0 + self.latency_s


def one_turn(url: str, session: str, timeout_s: float) -> tuple[str, str]:
    body = json.dumps(
        {"session": session, "append_tokens": APPEND_TOKENS, "gen_tokens": GEN_TOKENS}
    ).encode()
    req = urllib.request.Request(
        f"{url.rstrip('/')}/v1/agent/turn", body, {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
            return str(resp.status), ""
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            reason = str(json.loads(text)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            reason = text
        return str(exc.code), " ".join(reason.split())[:200]
    except TimeoutError:
        return "timeout", f"no answer within {timeout_s:g} s"
    except (urllib.error.URLError, OSError) as exc:
        cause: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(cause, TimeoutError):
            return "timeout", f"no answer within {timeout_s:g} s"
        return "error", " ".join(str(cause).split())[:200]


class Clients:
    """`n` client threads appending Turn records to `out` until `stop` is set."""

    def __init__(self, url: str, n: int, out: TextIO, timeout_s: float) -> None:
        self.url, self.n, self.out, self.timeout_s = url, n, out, timeout_s
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,)) for i in range(n)]

    def _client(self, i: int) -> None:
        sessions = 0
        while not self.stop.is_set():
            session = f"faults-{i}-{sessions}-{time.time_ns()}"
            sessions += 1
            for turn in range(SESSION_TURNS):
                t0 = time.time()
                status, reason = one_turn(self.url, session, self.timeout_s)
                rec = Turn(i, session, turn, t0, time.time() - t0, status, reason)
                with self._lock:
                    self.out.write(json.dumps(asdict(rec)) + "\n")
                    self.out.flush()
                if status != "200":
                    self.stop.wait(0.2)  # a refused cluster answers at once: do not spin
                    break
                if self.stop.is_set():
                    break

    def run(self, duration_s: float) -> None:
        for t in self._threads:
            t.start()
        self.stop.wait(duration_s)
        self.stop.set()
        for t in self._threads:  # the turns in flight end within their timeout
            t.join(self.timeout_s + 5)


def read(path: Path) -> list[Turn]:
    return [Turn(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True, slots=True)
class Window:
    """A fault held from `start` to `end` (wall clock, Unix s). Its phase runs from `since`
    (when the command that started it was run: turns already in flight then are the ones
    it hits) to `until` (the next fault's phase, or the end of the run): the recovery is in
    it too."""

    name: str
    since: float
    start: float
    end: float
    until: float


def summarize(turns: Sequence[Turn], windows: Iterable[Window]) -> dict[str, Any]:
    """Per fault: the answers of the turns started in its phase, the longest latency, and
    `recovered_s`: from the fault's end to the end of the first turn that started after it
    and succeeded (None: none did)."""
    out: dict[str, Any] = {"turns": len(turns), "statuses": dict(Counter(t.status for t in turns))}
    out["windows"] = []
    for w in windows:
        phase = [t for t in turns if w.since <= t.t0 < w.until]
        after = [t.t1 - w.end for t in turns if t.t0 >= w.end and t.status == "200"]
        # "turn 170 failed ... oldest 14.8 s": one reason, whatever the numbers
        reasons = Counter(_NUMBER.sub("N", t.reason) for t in phase if t.status != "200")
        out["windows"].append(
            {
                "name": w.name,
                "fault_s": round(w.end - w.start, 2),
                "turns": len(phase),
                "statuses": dict(sorted(Counter(t.status for t in phase).items())),
                "longest_s": round(max((t.latency_s for t in phase), default=0.0), 2),
                "recovered_s": round(min(after), 2) if after else None,
                "reasons": dict(reasons.most_common(3)),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=300.0, help="wall s at most")
    ap.add_argument("--timeout", type=float, default=30.0, help="per turn, wall s")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, one per turn")
    a = ap.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w") as out:
        clients = Clients(a.url, a.clients, out, a.timeout)
        signal.signal(signal.SIGTERM, lambda *_: clients.stop.set())
        clients.run(a.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
