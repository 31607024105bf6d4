"""Real bytes paced by `serving.pacing` between two processes on 127.0.0.1 (issue 11): the
delivered rate within ±2 % of the paced one, and a high-VL transfer's delay bounded by one
low-VL frame while low-VL flows saturate the same link.

200 Mbit/s moves a 1 MiB chunk every 42 ms: a few % of one core, so a loaded 2-core machine
keeps up; the bucket bounds the rate from above, and the rate is measured over >= 3.5 s
after a 0.5 s warm-up (the bucket's initial burst), so a wake-up late by tens of ms moves it
by < 1 %.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

PROBE = [sys.executable, "-m", "dualpath.runtimes.process.serving.pacing_probe"]
RATE_GBPS = 0.2
START_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc = subprocess.Popen(
        [*PROBE, "serve", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        while "listening on" not in line:
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, "the probe server did not start"
            if select.select([proc.stdout], [], [], left)[0]:
                line = proc.stdout.readline()
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def send(target: str, *args: str) -> dict[str, Any]:
    cmd = [*PROBE, "send", "--target", target, "--rate-gbps", str(RATE_GBPS), "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    print(done.stdout)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_one_paced_stream_delivers_the_configured_rate_within_2_percent(server: str) -> None:
    out = send(server, "--seconds", "4")
    assert out["configured_bps"] == RATE_GBPS * 1e9
    assert out["window_s"] > 3.0
    assert abs(out["error_pct"]) <= 2.0, out


def test_high_vl_transfer_delay_is_bounded_while_low_vl_flows_saturate_the_link(
    server: str,
) -> None:
    out = send(server, "--seconds", "6", "--mixed", "--low-flows", "4")
    high, fifo = out["high"], out["fifo"]
    assert abs(out["error_pct"]) <= 2.0, out  # the low flows did saturate the link
    # (S + one low chunk)/rate + 50 ms of host jitter; the same transfer queued FIFO behind
    # the four low flows takes about (S/chunk)·5 chunk times (0.42 s here)
    assert high["delay_s"] <= high["bound_s"], out
    # paced, not unshaped: the saturated bucket holds less than one chunk of tokens
    rate = out["configured_bps"] / 8
    assert high["delay_s"] >= 0.95 * (high["bytes"] - out["chunk_bytes"]) / rate, out
    assert fifo["delay_s"] > high["delay_s"], out
