"""Workload: trajectory model, A.3 extra agents, max_len cut, scaling, parsing, arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from dualpath.model.workload import (
    BASE_TRAJECTORIES,
    TABLE2,
    Table2Row,
    Trajectory,
    Turn,
    offline_arrivals,
    online_arrivals,
    parse_max_len,
    profile_for,
    synthetic_trajectories,
    table2_row,
    trajectory_stats,
)
from dualpath.model.workload.synthetic import EXTRA_PREFIX_TOKENS, base_arrays

K = 1024


# --- data types and statistics definitions -----------------------------------------------
def test_turn_rejects_empty_rounds() -> None:
    with pytest.raises(ValueError):
        Turn(0, 1)
    with pytest.raises(ValueError):
        Turn(5, 0)


def test_contexts_and_prompts_follow_a3() -> None:
    t = Trajectory(0, (Turn(100, 10), Turn(20, 5), Turn(7, 3)))
    assert list(t.contexts()) == [0, 110, 135]
    assert list(t.prompts()) == [100, 130, 142]
    assert t.total == 145


def test_stats_definitions_on_a_hand_example() -> None:
    short = Trajectory(0, (Turn(1000, 24),))  # one big first prompt
    long_ = Trajectory(1, (Turn(100, 28), Turn(60, 4), Turn(60, 4)))
    s = trajectory_stats([short, long_])
    assert s["turns"] == 2.0
    assert s["append"] == (1000 + (100 + 60 + 60) / 3) / 2  # mean of per-trajectory means
    assert s["append_pooled"] == (1000 + 220) / 4  # mean over all turns
    assert s["gen"] == (24 + 12) / 2
    assert s["total"] == (1024 + 256) / 2
    assert s["context"] == (0 + 0 + 128 + 192) / 4  # per request, before the append
    assert s["prompt"] == (1000 + 100 + 188 + 252) / 4
    assert s["hit_rate"] == (128 + 192) / (1000 + 100 + 188 + 252)  # full 64-token blocks


# --- determinism and the A.3 extra-agent rule --------------------------------------------
def test_same_seed_same_trajectories() -> None:
    a = synthetic_trajectories(64 * K, 700, seed=3)
    b = synthetic_trajectories(64 * K, 700, seed=3)
    c = synthetic_trajectories(64 * K, 700, seed=4)
    assert a == b
    assert a != c


def test_agents_keep_their_identity_as_n_grows() -> None:
    small = synthetic_trajectories(48 * K, 12, seed=1)
    big = synthetic_trajectories(48 * K, 1024, seed=1)
    assert big[:12] == small
    assert [t.agent_id for t in big] == list(range(1024))


def test_extra_agents_prepend_a_synthetic_round() -> None:
    max_len = 64 * K
    trajs = synthetic_trajectories(max_len, 2048, seed=7)
    base = {t.turns: t for t in trajs[:BASE_TRAJECTORIES]}
    base_turns = [t.turns for t in trajs[:BASE_TRAJECTORIES]]
    cap = profile_for(max_len).first_cap
    for t in trajs[BASE_TRAJECTORIES:]:
        first, rest = t.turns[0], t.turns[1:]
        assert first.gen == 1 and 1 <= first.append <= cap
        # the rest is a leading part of one base trajectory (cut again after the prepend)
        assert any(bt[: len(rest)] == rest for bt in base_turns), t.agent_id
        assert t.total <= max_len
    assert len(base) > 0
    firsts = [t.turns[0].append for t in trajs[BASE_TRAJECTORIES:]]
    lo, hi = EXTRA_PREFIX_TOKENS
    assert all(lo <= a <= hi for a in firsts)  # a short random prefix (A.3 gives no length)
    # so extra agents keep the dataset's statistics: Table 2 holds at any agent count
    extra = trajectory_stats(trajs[BASE_TRAJECTORIES:])
    assert extra["context"] == pytest.approx(32_721, rel=0.06)


# --- the max_len cut and Fig. 9 scaling ---------------------------------------------------
@pytest.mark.parametrize("row", TABLE2, ids=lambda r: r.label)
@pytest.mark.parametrize("scale", [(1.0, 1.0), (3.0, 1.0), (1.0, 2.0), (0.5, 0.5)])
def test_cut_is_exact(row: Table2Row, scale: tuple[float, float]) -> None:
    max_len = row.max_len
    trajs = synthetic_trajectories(max_len, BASE_TRAJECTORIES, 5, *scale)
    natural = base_arrays(profile_for(max_len), max_len, 5, *scale)
    cum = natural.cumulative()
    for j, t in enumerate(trajs):
        n = len(t.turns)
        assert n >= 1 and t.total <= max_len
        if n < natural.lengths[j]:  # stopped by the cut, not by the agent finishing
            assert cum[natural.offsets[j] + n] > max_len


def test_append_scale_multiplies_every_round_then_cuts() -> None:
    one = synthetic_trajectories(64 * K, 200, seed=2)
    three = synthetic_trajectories(64 * K, 200, seed=2, append_scale=3.0)
    for a, b in zip(one, three, strict=True):
        assert len(b.turns) <= len(a.turns)
        for ta, tb in zip(a.turns, b.turns, strict=False):
            assert tb.append == max(1, round(3 * ta.append)) and tb.gen == ta.gen
    s1, s3 = trajectory_stats(one), trajectory_stats(three)
    assert s3["turns"] < 0.6 * s1["turns"]


def test_requested_max_len_is_the_cut() -> None:
    trajs = synthetic_trajectories(30_000, 300, seed=1)  # 32K dataset, cut at 30,000
    assert max(t.total for t in trajs) <= 30_000


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_agents"):
        synthetic_trajectories(64 * K, 0, seed=1)
    with pytest.raises(ValueError, match="scales"):
        synthetic_trajectories(64 * K, 4, seed=1, append_scale=0)
    with pytest.raises(ValueError, match="--max-len"):
        synthetic_trajectories(16 * K, 4, seed=1)


# --- --max-len ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [("64k", 65536), ("64K", 65536), ("65536", 65536), (" 32k ", 32768), ("48K", 49152),
     ("33k", 33792), (49152, 49152)],
)  # fmt: skip
def test_parse_max_len_accepts(text: str | int, value: int) -> None:
    assert parse_max_len(text) == value


@pytest.mark.parametrize("text", ["", "abc", "64kb", "64 k tokens", "-64k", "6.4e4", "0x100"])
def test_parse_max_len_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match=r"--max-len: cannot parse .*32k, 48K, 64k or 65536"):
        parse_max_len(text)


@pytest.mark.parametrize("text", ["0", "16k", "40k", "128k", 100])
def test_parse_max_len_rejects_lengths_without_a_dataset(text: str | int) -> None:
    with pytest.raises(ValueError, match=r"--max-len: no paper trace profile.*32k, 48k, 64k"):
        parse_max_len(text)


def test_rows_map_within_tolerance() -> None:
    assert table2_row(32 * K).turns == 60
    assert table2_row(70_000).max_len == 64 * K
    assert table2_row(45_000).max_len == 48 * K


# --- arrivals -----------------------------------------------------------------------------
def test_offline_agents_start_together() -> None:
    assert offline_arrivals(3) == [0.0, 0.0, 0.0]


def test_online_arrivals_are_poisson() -> None:
    t = online_arrivals(0.4, 20_000, seed=9)
    assert t == online_arrivals(0.4, 20_000, seed=9)
    gaps = np.diff([0.0, *t])
    assert np.all(gaps > 0)
    assert abs(gaps.mean() * 0.4 - 1) < 0.03  # mean gap 1/APS (SE ~0.7%)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05  # exponential: CV = 1
    with pytest.raises(ValueError):
        online_arrivals(0, 3, seed=1)


def test_paper_scale_agent_count() -> None:
    """48K agents (Table 3's 48P96D run): builds in about a second, sharing base turns."""
    trajs = synthetic_trajectories(64 * K, 48 * K, seed=11)
    assert len(trajs) == 48 * K and trajs[-1].agent_id == 48 * K - 1
    assert len(synthetic_trajectories(32 * K, 1, seed=11)) == 1
