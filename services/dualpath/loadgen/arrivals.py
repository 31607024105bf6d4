"""Session arrivals (paper §7.4: agents arrive as a Poisson process at APS) and the test that
checks them.

Arrivals are drawn in ONE place (the Locust master, or the single local process) and the
schedule is kept on absolute times from the start, so late wake-ups (a busy gevent hub)
shift single arrivals but never accumulate into a lower rate. `ks_exponential` is the
one-sample Kolmogorov-Smirnov test the tests use to show the inter-arrival times are
exponential (and that Locust's constant spawn rate is not).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass


def poisson_times(rate: float, rng: random.Random) -> Iterator[float]:
    """Arrival times from 0 of a Poisson process at `rate` per second: cumulative Exp(rate)
    gaps, the first one included (as `dualpath.model.workload.online_arrivals`); unbounded."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def run_schedule(
    times: Iterable[float],
    launch: Callable[[], bool],
    sleep: Callable[[float], object],
    now: Callable[[], float],
) -> int:
    """Call `launch` at each time (seconds after the call); stop early when it returns
    False. Returns how many launches happened."""
    t0 = now()
    n = 0
    for t in times:
        delay = t0 + t - now()
        if delay > 0:
            sleep(delay)
        if not launch():
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class KsResult:
    statistic: float  # D_n = sup_x |F_n(x) - F(x)|
    p_value: float  # P(D_n >= statistic) if the samples do come from F
    n: int


def ks_exponential(samples: Sequence[float], rate: float) -> KsResult:
    """One-sample Kolmogorov-Smirnov test of `samples` against Exp(rate).

    D_n is taken at the order statistics x_(1) <= ... <= x_(n), where the empirical CDF
    jumps: D_n = max_i max(i/n - F(x_(i)), F(x_(i)) - (i-1)/n), F(x) = 1 - exp(-rate x).
    """
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("ks_exponential needs at least one sample")
    d = 0.0
    for i, x in enumerate(xs, start=1):
        f = -math.expm1(-rate * max(x, 0.0))
        d = max(d, i / n - f, f - (i - 1) / n)
    return KsResult(d, kolmogorov_sf(d, n), n)


def kolmogorov_sf(d: float, n: int) -> float:
    """P(D_n > d): the asymptotic Kolmogorov distribution with Stephens' finite-n correction
    lambda = (sqrt(n) + 0.12 + 0.11 / sqrt(n)) d (Numerical Recipes, 3rd ed., §14.3.3),
    accurate to about 1 % in p for n >= 20 and far better than that in the tail that decides.

    Q(l) = 2 sum_{j>=1} (-1)^(j-1) exp(-2 j^2 l^2) converges fast for l >= 1.18; below, its
    equivalent form 1 - (sqrt(2 pi) / l) sum_{j>=1} exp(-(2j-1)^2 pi^2 / (8 l^2)) does.
    """
    sqrt_n = math.sqrt(n)
    lam = (sqrt_n + 0.12 + 0.11 / sqrt_n) * d
    if lam <= 0:
        return 1.0
    if lam < 1.18:
        y = math.exp(-(math.pi**2) / (8 * lam * lam))
        series = math.fsum(y ** ((2 * j - 1) ** 2) for j in range(1, 6))
        return min(1.0, max(0.0, 1.0 - math.sqrt(2 * math.pi) / lam * series))
    x = math.exp(-2 * lam * lam)
    series = math.fsum((-1) ** (j - 1) * x ** (j * j) for j in range(1, 6))
    return min(1.0, max(0.0, 2 * series))
