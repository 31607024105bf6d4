"""`TokenPacer`: a streamed turn's tokens are released at their announced emulated times."""

from __future__ import annotations

from dualpath.model.core.clock import VirtualClock, run_virtual
from dualpath.runtimes.process.serving.pacer import TokenPacer

Emits = list[tuple[float, int, float]]  # (released at, tokens, emulated time of the last)


def _pacer(clock: VirtualClock, out: Emits) -> TokenPacer:
    return TokenPacer(clock, lambda n, t: out.append((clock.now(), n, t)))


def test_tokens_are_released_one_step_apart_not_in_a_burst() -> None:
    async def main(clock: VirtualClock) -> Emits:
        out: Emits = []
        pacer = _pacer(clock, out)
        pacer.plan(tokens=5, chunk_tokens=4, t_last=1.4, step_s=0.1)  # tokens 2..5
        await clock.sleep_until(2.0)
        return out

    out = run_virtual(main)
    assert [n for _, n, _ in out] == [2, 3, 4, 5]
    for at, _, t in out:
        assert abs(at - t) < 1e-9  # each at its own step time
    assert [round(t, 9) for _, _, t in out] == [1.1, 1.2, 1.3, 1.4]


def test_a_cut_chunk_is_re_timed_by_the_next_announcement() -> None:
    async def main(clock: VirtualClock) -> Emits:
        out: Emits = []
        pacer = _pacer(clock, out)
        pacer.plan(tokens=5, chunk_tokens=4, t_last=1.4, step_s=0.1)
        await clock.sleep_until(1.25)  # tokens 2, 3 out; a join cut the chunk after 3
        pacer.plan(tokens=6, chunk_tokens=3, t_last=1.9, step_s=0.2)  # 4..6, slower steps
        await clock.sleep_until(3.0)
        return out

    out = run_virtual(main)
    want = [(2, 1.1), (3, 1.2), (4, 1.5), (5, 1.7), (6, 1.9)]
    assert [(n, round(t, 9)) for _, n, t in out] == want


def test_finish_releases_the_rest_at_once_and_stale_plans_are_ignored() -> None:
    async def main(clock: VirtualClock) -> Emits:
        out: Emits = []
        pacer = _pacer(clock, out)
        pacer.plan(tokens=9, chunk_tokens=8, t_last=5.0, step_s=0.5)
        await clock.sleep_until(1.6)  # token 2 is due at 1.5
        pacer.finish(9, 5.0)
        pacer.plan(tokens=9, chunk_tokens=8, t_last=5.0, step_s=0.5)  # late duplicate
        await clock.sleep_until(6.0)
        return out

    out = run_virtual(main)
    assert [(round(at, 9), n) for at, n, _ in out] == [(1.5, 2), (1.6, 9)]


def test_tokens_keep_their_spacing_after_a_late_first_token() -> None:
    async def main(clock: VirtualClock) -> Emits:
        out: Emits = []
        pacer = _pacer(clock, out)
        pacer.plan(tokens=3, chunk_tokens=2, t_last=1.2, step_s=0.1)
        await clock.sleep_until(1.03)
        pacer.started(t_first=1.0)  # its report took 30 ms: so do the others
        await clock.sleep_until(2.0)
        return out

    out = run_virtual(main)
    assert [(round(at, 9), n) for at, n, _ in out] == [(1.13, 2), (1.23, 3)]
