"""Nemesis runs: random fault schedules under a steady agent load on the process runtime,
then the checker (model/faults/checker.py) over the clients' records and the Redis history.

    python -m dualpath.runtimes.process.launcher.nemesis --schedules 20 --out out/nemesis.json

Each schedule gets a fresh local cluster (1P2D smoke: one decode node can die while the
other serves), `--sessions` agents of `--turns` turns each, sequential per session, and two
or three faults among: kill a node or the storage (restarted after d), pause a node shorter
or longer than its heartbeat lease (a long pause fences it), stop Redis. After the load the
storage is asked what it serves: every block it acknowledged must be there (a killed
storage restores its index; the decode nodes send their unacknowledged persists again).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from dualpath.model.config.presets import resolve
from dualpath.model.config.settings import Scenario
from dualpath.model.faults.checker import ClientRecord, check
from dualpath.model.faults.spec import parse_all
from dualpath.rpc.v1 import kv_pb2, kv_pb2_grpc
from dualpath.runtimes.process.control import BlockIndex, EventLog
from dualpath.runtimes.process.launcher.collect import gather_stats
from dualpath.runtimes.process.launcher.faults import LiveFaults
from dualpath.runtimes.process.launcher.local import LocalCluster, UpOptions, local_cluster
from dualpath.runtimes.process.launcher.run import finish_run
from dualpath.runtimes.process.serving.peers import make_channel

DILATION = 4.0
TURN_TIMEOUT_S = 90.0  # wall: far beyond any fault's recovery; past it a turn is "lost"
SETTLE_S = 30.0  # wall: the decode nodes' last unacknowledged persists land within it


@dataclass(frozen=True)
class Load:
    sessions: int = 10
    turns: int = 20
    append_tokens: int = 1500
    gen_tokens: int = 128


def random_schedule(rng: random.Random, horizon_s: float, storage: bool = True) -> list[str]:
    """Two or three faults inside the first `horizon_s` emulated seconds of the load; with
    `storage`, a quarter of the kills kill the storage."""
    out = []
    for _ in range(rng.choice((2, 3))):
        at = rng.uniform(4.0, horizon_s)
        kind = rng.choice(("kill", "pause", "pause", "redis-drop"))
        node = rng.choice(("prefill0", "decode0", "decode1"))
        if kind == "kill" and storage and rng.random() < 0.25:
            node = "storage"
        if kind == "kill":
            out.append(f"kill:{node}@{at:.1f}+{rng.uniform(4, 16):.1f}")
        elif kind == "pause":  # below and above the 3 s (wall) lease at dilation 4
            out.append(f"pause:{node}@{at:.1f}+{rng.choice((2.0, 6.0, 20.0)):.1f}")
        else:
            out.append(f"redis-drop@{at:.1f}+{rng.uniform(2, 12):.1f}")
    return out


def _turn(http: str, session: str, seq: int, load: Load) -> ClientRecord:
    body = {"session": session, "append_tokens": load.append_tokens, "gen_tokens": load.gen_tokens}
    req = urllib.request.Request(
        f"http://{http}/v1/agent/turn",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TURN_TIMEOUT_S) as resp:
            rid = int(json.load(resp)["request_id"])
            return ClientRecord(session, seq, resp.status, rid)
    except urllib.error.HTTPError as err:
        return ClientRecord(session, seq, err.code, None, err.read(300).decode(errors="replace"))
    except OSError as exc:  # a timeout or a dropped connection: no answer
        return ClientRecord(session, seq, 0, None, repr(exc))


def _agent(http: str, session: str, load: Load, out: list[ClientRecord]) -> None:
    for seq in range(load.turns):
        rec = _turn(http, session, seq, load)
        out.append(rec)
        if rec.status == 409:  # the session's previous turn still runs server-side
            time.sleep(0.5)


def run_schedule(sc: Scenario, specs: list[str], run_dir: Path, load: Load) -> dict[str, Any]:
    opts = UpOptions(run_dir, http_port=0, dilation=DILATION)
    with local_cluster(sc, opts) as cl:
        started = time.perf_counter()
        records: list[ClientRecord] = []
        agents = [
            threading.Thread(target=_agent, args=(cl.http_addr, f"n{i}", load, records))
            for i in range(load.sessions)
        ]
        redis_pid = cl.redis.pid if cl.redis is not None else None
        # the schedule counts from the load's start; the events from the run's epoch
        offset = (time.perf_counter() - cl.epoch) * DILATION
        faults = [dataclasses.replace(f, at_s=f.at_s + offset) for f in parse_all(specs)]
        cl.faults = LiveFaults(faults, cl.group, lambda: redis_pid, cl.epoch, DILATION)
        for a in agents:
            a.start()
        while any(a.is_alive() for a in agents) or cl.faults.pending:
            cl.tick()
            time.sleep(0.05)
        wall = time.perf_counter() - started
        fault_log = list(cl.faults.log)
        stored = _served_at_end(cl)
        report = finish_run(sc, cl, started, wall, len(records))
        events = asyncio.run(_events(cl.redis_url, cl.run_id))
    verdict = check(records, events, report["integrity"], stored)
    return {
        "schedule": specs,
        "verdict": verdict.summary(),
        "detect_s": _detect_times(fault_log, events),
        "wall_s": round(wall, 1),
        "resilience": report["runtime"]["resilience"],
        "tier": report.get("tier"),  # with the DRAM tier on (docs/tier.md)
    }


def _served_at_end(cl: LocalCluster) -> dict[int, int]:
    """Once the decode nodes hold no unacknowledged persist (bounded), the prefix the
    storage serves for every session its index names."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        addrs = cl.settle()
        stats = asyncio.run(gather_stats(addrs, token=cl.opts.token))
        unsettled = sum(s.get("persists_unsettled", 0) for s in stats)
        if unsettled == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return asyncio.run(_lookup(cl.redis_url, cl.run_id, addrs["storage"], cl.opts.token))


async def _lookup(url: str, run_id: str, addr: str, token: str | None) -> dict[int, int]:
    r = aioredis.Redis.from_url(url)
    try:
        sessions = sorted(await BlockIndex(r, run_id).load())
    finally:
        await r.aclose()
    channel = make_channel(addr, token)
    try:
        reply = await kv_pb2_grpc.BlockStoreStub(channel).Lookup(
            kv_pb2.LookupRequest(sessions=sessions), timeout=30
        )
    finally:
        await channel.close()
    return dict(zip(sessions, (int(n) for n in reply.prefix_blocks), strict=True))


async def _events(url: str, run_id: str) -> list[dict[str, Any]]:
    r = aioredis.Redis.from_url(url)
    try:
        return await EventLog(r, run_id, "nemesis").read_all()
    finally:
        await r.aclose()


def _detect_times(fault_log: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[float]:
    """Emulated seconds from each kill to the scheduler's declaring that node lost or
    restarted (both on the run's emulated clock)."""
    out = []
    kills = [f for f in fault_log if f["fault"].startswith("kill:") and f["event"] == "applied"]
    lost = [e for e in events if e.get("kind") in ("engine_lost", "engine_restarted")]
    for k in kills:
        node = k["fault"].split(":", 1)[1].split("@", 1)[0]
        after = [float(e["t"]) - k["t_s"] for e in lost if e.get("name") == node]
        after = [t for t in after if t >= 0]
        if after:
            out.append(round(min(after), 2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--turns", type=int, default=20, help="turns per session")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("out/nemesis.json"))
    ap.add_argument("--fault", action="append", default=[], help="run this one schedule (repeat)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sc = resolve("smoke", {"topology": {"decode_nodes": 2}}, [])
    load = Load(args.sessions, args.turns)
    results = []
    for i in range(1 if args.fault else args.schedules):
        specs = args.fault or random_schedule(rng, horizon_s=40.0)
        res = run_schedule(sc, specs, args.out.parent / f"nemesis-{i}", load)
        results.append(res)
        v = res["verdict"]
        print(
            f"[{i + 1}] {' '.join(specs)}: ok={v['ok']} turns={v['turns']} "
            f"completed={v['completed']} failed={v['failed_explicitly']} lost={v['lost']} "
            f"dup={v['duplicated']} order={v['out_of_order']} blocks_lost={v['blocks_lost']} "
            f"corrupted={v['blocks_corrupted']} persisted_missing={v['persisted_missing']} "
            f"detect={res['detect_s']} wall={res['wall_s']} s",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    bad = [r for r in results if not r["verdict"]["ok"]]
    print(f"{len(results) - len(bad)}/{len(results)} schedules passed; {args.out}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
