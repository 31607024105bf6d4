"""Session arrivals are Poisson: the inter-arrival times pass a one-sample KS test against
the exponential at the configured rate, and Locust's own constant spawn rate fails it.

The KS test (`dualpath.loadgen.arrivals.ks_exponential`) is checked against the
Kolmogorov distribution's known quantiles first."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
import textwrap

import pytest

from dualpath.loadgen.arrivals import kolmogorov_sf, ks_exponential, poisson_times, run_schedule

N, RATE, ALPHA = 400, 5.0, 0.01


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sorted(times))]


@pytest.mark.parametrize(
    ("lam", "p"), [(0.8276, 0.5), (1.2238, 0.10), (1.3581, 0.05), (1.6276, 0.01), (1.9495, 0.001)]
)
def test_kolmogorov_tail_matches_the_tables(lam: float, p: float) -> None:
    n = 10**8  # asymptotic: lambda = sqrt(n) * D
    assert kolmogorov_sf(lam / (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)), n) == pytest.approx(
        p, rel=0.01
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_arrivals_pass_and_a_fixed_rate_fails(seed: int) -> None:
    clock = [0.0]  # a virtual clock: run_schedule's sleeps advance it exactly
    times: list[float] = []

    def sleep(s: float) -> None:
        clock[0] += s

    def launch() -> bool:
        times.append(clock[0])
        return len(times) <= N

    run_schedule(poisson_times(RATE, random.Random(seed)), launch, sleep, lambda: clock[0])
    assert len(times) == N + 1
    poisson = ks_exponential(_gaps(times), RATE)
    fixed = ks_exponential([1 / RATE] * N, RATE)  # a constant spawn rate of RATE users/s
    print(f"\nseed {seed}: Poisson D={poisson.statistic:.4f} p={poisson.p_value:.3f}; "
          f"fixed rate D={fixed.statistic:.4f} p={fixed.p_value:.2e}")  # fmt: skip
    assert poisson.p_value > ALPHA
    assert fixed.p_value < ALPHA
    assert sum(_gaps(times)) / N == pytest.approx(1 / RATE, rel=0.15)


# Both processes measured in real time under gevent, as they run inside Locust: our schedule
# (the code the locustfile's arrival greenlet runs) and Locust's own spawner (a LocalRunner
# at spawn rate R: the user start times).
_MEASURE = textwrap.dedent(
    """
    import json, random, sys, time
    import gevent
    from locust import User, constant, task
    from locust.env import Environment
    from dualpath.loadgen.arrivals import poisson_times, run_schedule

    n, rate = int(sys.argv[1]), float(sys.argv[2])
    starts = []

    class Session(User):
        wait_time = constant(600)
        def on_start(self):
            starts.append(time.perf_counter())
        @task
        def idle(self):
            pass

    runner = Environment(user_classes=[Session]).create_local_runner()
    runner.start(n, spawn_rate=rate)
    deadline = time.monotonic() + 3 * n / rate + 10
    while len(starts) < n and time.monotonic() < deadline:
        gevent.sleep(0.05)
    runner.quit()
    ours = []
    def launch():
        ours.append(time.perf_counter())
        return len(ours) < n
    run_schedule(poisson_times(rate, random.Random(7)), launch, gevent.sleep, time.monotonic)
    print(json.dumps({"locust": starts, "ours": ours}))
    """
)


def test_measured_arrivals_in_a_gevent_process() -> None:
    n, rate = 250, 40.0
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(n), str(rate)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = ks_exponential(_gaps(measured["ours"]), rate)
    locust = ks_exponential(_gaps(measured["locust"]), rate)
    print(f"\nmeasured, {n} arrivals at {rate}/s: ours D={ours.statistic:.4f} "
          f"p={ours.p_value:.3f}; Locust spawn rate D={locust.statistic:.4f} "
          f"p={locust.p_value:.2e}")  # fmt: skip
    assert len(measured["ours"]) == len(measured["locust"]) == n
    assert ours.p_value > ALPHA
    assert locust.p_value < ALPHA
