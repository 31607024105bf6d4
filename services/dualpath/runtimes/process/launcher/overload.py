"""Overload check of the live cluster (`python -m dualpath.runtimes.process.launcher.overload`):
open-loop
requests of fresh prompts at RATE per wall second for DURATION seconds against a local smoke
cluster at dilation 1 — a multiple of what it can serve — then one ordinary turn.

Prints what clients saw (status codes: only 200 and 429 are acceptable), the admitted
turns' emulated TTFT quantiles (bounded by the admission limit,
runtimes/process/serving/admission.py), the
peak RSS of every service process (sampled each second) and how the next turn fared.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from dualpath.model.config.presets import resolve
from dualpath.runtimes.process.launcher.local import UpOptions, local_cluster


async def _drive(base: str, rate: float, duration: float, prompt: int) -> dict[str, Any]:
    codes: collections.Counter[int] = collections.Counter()
    ttft: list[float] = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as s:

        async def one(i: int) -> None:
            body = {"session": f"o{i}", "append_tokens": prompt, "gen_tokens": 16}
            async with s.post(f"{base}/v1/agent/turn", json=body) as r:
                data = json.loads(await r.read())
                codes[r.status] += 1
                if r.status == 200:
                    ttft.append(float(data["ttft_s"]))

        tasks, t0, i = [], time.perf_counter(), 0
        while time.perf_counter() - t0 < duration:
            tasks.append(asyncio.ensure_future(one(i)))
            i += 1
            await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
        t1 = time.perf_counter()
        after = {"session": "after", "append_tokens": 100, "gen_tokens": 4}
        async with s.post(f"{base}/v1/agent/turn", json=after) as r:
            after_status = r.status
    ttft.sort()

    def q(p: float) -> float | None:
        return round(ttft[min(len(ttft) - 1, int(p * len(ttft)))], 3) if ttft else None

    return {
        "sent": i,
        "codes": dict(codes),
        "admitted_ttft_s": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0)},
        "next_turn": {"status": after_status, "wall_s": round(time.perf_counter() - t1, 3)},
    }


async def _peak_rss(procs: list[psutil.Process], peak: dict[str, int]) -> None:
    while True:
        for p in procs:
            try:
                peak[p.name()] = max(peak.get(p.name(), 0), p.memory_info().rss)
            except psutil.Error:
                continue
        await asyncio.sleep(1.0)


async def _measure(base: str, procs: list[psutil.Process], args: Any) -> dict[str, Any]:
    peak: dict[str, int] = {}
    sampler = asyncio.ensure_future(_peak_rss(procs, peak))
    try:
        out = await _drive(base, args.rate, args.duration, args.prompt)
    finally:
        sampler.cancel()
    out["peak_rss_mb"] = {k: round(v / 2**20) for k, v in peak.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50.0, help="requests per wall second")
    ap.add_argument("--duration", type=float, default=60.0, help="wall seconds")
    ap.add_argument("--prompt", type=int, default=20_000, help="tokens of each fresh prompt")
    args = ap.parse_args()
    sc = resolve("smoke", {}, [])
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_cluster(sc, UpOptions(Path(tmp), http_port=0, dilation=1.0)) as cl,
    ):
        procs = [psutil.Process(p.popen.pid) for p in cl.group.procs]
        result = asyncio.run(_measure(f"http://{cl.http_addr}", procs, args))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
