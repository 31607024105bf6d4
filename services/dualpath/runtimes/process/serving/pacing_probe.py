"""Measure real bytes paced by `serving.pacing` between two processes (or containers).

    python -m dualpath.runtimes.process.serving.pacing_probe serve --host 0.0.0.0 --port 7070
    python -m dualpath.runtimes.process.serving.pacing_probe send --target HOST:7070 --rate-gbps
    0.2 --seconds 4
    python -m dualpath.runtimes.process.serving.pacing_probe send --target HOST:7070 --rate-gbps
    0.2 \\
        --seconds 6 --mixed            # + a high-VL transfer while low-VL flows saturate

The sender paces chunks through one `Pacer` link of the configured rate (the paper's CNIC
VLs: model traffic on VL0 is high, KV on VL2 low) over plain asyncio TCP streams; the
receiver timestamps every chunk as it completes and sends the times back, so every figure
is measured on one clock, the receiver's. Delivered rate: the bytes of the chunks completed
after the warm-up (the first bucket's burst) over the time they took. Mixed run: the high-VL
transfer's delay (first chunk queued to the receiver's ack) against the bound of one low
frame, (S + chunk)/rate + BURST_S of host jitter, and the same transfer on the low VL for
comparison. `--tolerance-pct` turns it into a check: exit 1 above rate + tolerance (the
shaper let too much through: a bug), 2 below rate - tolerance (the sender could not keep
up: e.g. CPU-starved), 3 a high-VL delay over its bound. The server keeps nothing: it reads,
counts and discards; it is a measuring tool, not a service (no token).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from dualpath.runtimes.process.serving.pacing import BURST_S, LinkPace, Pacer
from dualpath.runtimes.process.serving.payload import CHUNK_BYTES

LINK = "probe.link"
MODEL_VL, KV_VL = 0, 2
HIGH_VLS = frozenset({0, 1, 3})  # paper_cnic_arbitration(): the high table
STREAM_LIMIT = 1 << 24  # the receiver's report line (one time per chunk)

Marks = list[tuple[float, int]]  # (receiver time a piece completed, its bytes)


# --- receiver -------------------------------------------------------------------------------
async def _receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = json.loads(await reader.readline())
        chunk, size = int(head["chunk"]), int(head["size"])  # size 0: until end of stream
        marks: Marks = []
        got = 0
        while size == 0 or got < size:
            want = chunk if size == 0 else min(chunk, size - got)
            try:
                await reader.readexactly(want)
            except asyncio.IncompleteReadError as exc:
                got += len(exc.partial)
                break
            got += want
            marks.append((time.perf_counter(), want))
        if head.get("ack"):
            writer.write(b"ack\n")
            await writer.drain()
        await reader.read()  # the sender's end of stream
        writer.write(json.dumps({"bytes": got, "marks": marks}).encode() + b"\n")
        await writer.drain()
    except (ConnectionError, ValueError, KeyError) as exc:
        print(f"pacing probe: connection dropped: {exc!r}", file=sys.stderr)
    finally:
        writer.close()


async def serve(host: str, port: int) -> None:
    server = await asyncio.start_server(_receive, host, port, limit=STREAM_LIMIT)
    bound = server.sockets[0].getsockname()
    print(f"pacing probe listening on {bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


# --- sender ---------------------------------------------------------------------------------
class Sender:
    def __init__(self, target: str, rate_bps: float, chunk: int) -> None:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--target {target!r}: expected HOST:PORT")
        if not rate_bps > 0:
            raise ValueError(f"--rate-gbps: must be > 0, got {rate_bps / 1e9 * 8}")
        self.host, self.port, self.chunk = host, int(port), chunk
        self.rate = rate_bps
        self.pacer = Pacer({LINK: LinkPace(rate_bps, HIGH_VLS)}, chunk_bytes=chunk)
        self.buf = bytes(range(256)) * (chunk // 256 + 1)

    async def _open(self, size: int, ack: bool) -> tuple[asyncio.StreamReader, Any]:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=STREAM_LIMIT)
        writer.write(json.dumps({"chunk": self.chunk, "size": size, "ack": ack}).encode() + b"\n")
        await writer.drain()
        return reader, writer

    async def _finish(self, reader: asyncio.StreamReader, writer: Any) -> Marks:
        writer.write_eof()
        report = json.loads(await reader.readline())
        writer.close()
        return [(float(t), int(n)) for t, n in report["marks"]]

    async def stream(self, vl: int, seconds: float) -> Marks:
        """Chunks on `vl`, paced, for `seconds`; the receiver's marks."""
        reader, writer = await self._open(0, ack=False)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            await self.pacer.pace(LINK, vl, self.chunk)
            writer.write(self.buf[: self.chunk])
            await writer.drain()
        return await self._finish(reader, writer)

    async def transfer(self, vl: int, nbytes: int) -> tuple[float, Marks]:
        """One transfer of `nbytes` on `vl`: (seconds from its start to the receiver's ack,
        marks). The connection is opened first: its set-up is not part of the delay."""
        reader, writer = await self._open(nbytes, ack=True)
        t0 = time.perf_counter()
        async for n in self.pacer.chunks(LINK, vl, nbytes):
            writer.write(self.buf[:n])
            await writer.drain()
        await reader.readline()
        delay = time.perf_counter() - t0
        return delay, await self._finish(reader, writer)


def delivered(marks: Marks, warmup_s: float, until: float = float("inf")) -> tuple[float, float]:
    """(bytes/s, window s): the pieces completed after the first one at or past `warmup_s`
    into the run, up to `until`, over the time between that piece and the last."""
    marks = sorted(m for m in marks if m[0] <= until)
    if not marks:
        return 0.0, 0.0
    start = marks[0][0] + warmup_s
    after = [m for m in marks if m[0] >= start]
    if len(after) < 3:
        raise ValueError("pacing probe: fewer than 3 chunks after the warm-up: run longer")
    window = after[-1][0] - after[0][0]
    return sum(n for _, n in after[1:]) / window, window


async def run_single(s: Sender, vl: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    marks = await s.stream(vl, seconds)
    rate, window = delivered(marks, warmup_s)
    return _rate_figures(s, rate, window, sum(n for _, n in marks)) | {"vl": vl}


async def run_mixed(
    s: Sender, seconds: float, warmup_s: float, flows: int, high_bytes: int
) -> dict[str, Any]:
    """`flows` low-VL streams saturate the link; after the warm-up one high-VL transfer,
    then the same transfer on the low VL (served FIFO with the streams) for comparison."""
    bound = (high_bytes + s.chunk) / s.rate + BURST_S
    if seconds < warmup_s + 8 * bound:
        raise ValueError(f"--seconds {seconds}: a mixed run needs >= {warmup_s + 8 * bound:.1f}")
    lows = [asyncio.ensure_future(s.stream(KV_VL, seconds)) for _ in range(flows)]
    await asyncio.sleep(warmup_s)  # the transfers start once the streams saturate the link
    high_delay, high_marks = await s.transfer(MODEL_VL, high_bytes)
    fifo_delay, fifo_marks = await s.transfer(KV_VL, high_bytes)
    low_marks = await asyncio.gather(*lows)
    until = min(m[-1][0] for m in low_marks)  # while every low stream still ran
    allm = [m for ms in (*low_marks, high_marks, fifo_marks) for m in ms]
    rate, window = delivered(allm, warmup_s, until)
    out = _rate_figures(s, rate, window, sum(n for _, n in allm))
    out["high"] = {
        "vl": MODEL_VL,
        "bytes": high_bytes,
        "delay_s": high_delay,
        "bound_s": bound,
        "alone_s": high_bytes / s.rate,
    }
    out["fifo"] = {"vl": KV_VL, "bytes": high_bytes, "delay_s": fifo_delay}
    out["low_flows"] = flows
    return out


def _rate_figures(s: Sender, rate: float, window: float, total: int) -> dict[str, Any]:
    return {
        "configured_bps": s.rate * 8,
        "delivered_bps": rate * 8,
        "error_pct": 100 * (rate / s.rate - 1),
        "window_s": window,
        "bytes": total,
        "chunk_bytes": s.chunk,
    }


def verdict(out: dict[str, Any], tolerance_pct: float | None) -> int:
    if tolerance_pct is None:
        return 0
    if out["error_pct"] > tolerance_pct:
        return 1
    if out["error_pct"] < -tolerance_pct:
        return 2
    if "high" in out and out["high"]["delay_s"] > out["high"]["bound_s"]:
        return 3
    return 0


def describe(out: dict[str, Any]) -> str:
    lines = [
        f"configured {out['configured_bps'] / 1e6:.2f} Mbit/s, delivered "
        f"{out['delivered_bps'] / 1e6:.2f} Mbit/s, error {out['error_pct']:+.2f} % "
        f"(over {out['window_s']:.2f} s, {out['bytes']} bytes, chunks of {out['chunk_bytes']})"
    ]
    if "high" in out:
        h, f = out["high"], out["fifo"]
        lines.append(
            f"high-VL (VL{h['vl']}) transfer of {h['bytes']} B under {out['low_flows']} "
            f"saturating low-VL flows: delay {h['delay_s'] * 1e3:.1f} ms (bound "
            f"{h['bound_s'] * 1e3:.1f} ms, alone on an empty bucket {h['alone_s'] * 1e3:.1f} ms)"
        )
        lines.append(f"same transfer on the low VL (FIFO): {f['delay_s'] * 1e3:.1f} ms")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="receive and time paced streams")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    sd = sub.add_parser("send", help="send paced streams and report the delivered rate")
    sd.add_argument("--target", required=True, help="HOST:PORT of `serve`")
    sd.add_argument("--rate-gbps", type=float, required=True, help="the paced rate, Gbit/s")
    sd.add_argument("--seconds", type=float, default=4.0)
    sd.add_argument("--warmup-s", type=float, default=0.5, help="not measured (initial burst)")
    sd.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    sd.add_argument("--vl-high", action="store_true", help="single flow on VL0 (else VL2)")
    sd.add_argument("--mixed", action="store_true", help="high-VL transfer under low load")
    sd.add_argument("--low-flows", type=int, default=4)
    sd.add_argument("--high-bytes", type=int, default=2 * CHUNK_BYTES)
    sd.add_argument("--tolerance-pct", type=float, default=None, help="check; exit 1/2/3")
    sd.add_argument("--json", action="store_true", help="also print the figures as JSON")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        asyncio.run(serve(a.host, a.port))
        return 0
    try:
        s = Sender(a.target, a.rate_gbps * 1e9 / 8, a.chunk_bytes)
        if a.mixed:
            job = run_mixed(s, a.seconds, a.warmup_s, a.low_flows, a.high_bytes)
        else:
            job = run_single(s, MODEL_VL if a.vl_high else KV_VL, a.seconds, a.warmup_s)
        out = asyncio.run(job)
    except (ValueError, OSError) as exc:
        print(f"pacing probe: {exc}", file=sys.stderr)
        return 4
    print(describe(out), flush=True)
    if a.json:
        print(json.dumps(out), flush=True)
    return verdict(out, a.tolerance_pct)


if __name__ == "__main__":
    sys.exit(main())
