"""model/entities/queue.py: a private DE queue keeps Σ len_r exact under every mutation."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from dualpath.model.entities.queue import TokenQueue
from dualpath.model.entities.request import Request


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _req(loop: asyncio.AbstractEventLoop, rid: int, prompt: int, gen: int) -> Request:
    return Request(rid, rid, 0, prompt, gen, 0.0, loop.create_future())


OPS = ("append", "appendleft", "pop", "popleft", "remove", "extend", "extendleft", "insert",
       "del", "clear", "iadd", "rotate", "self")  # fmt: skip


def test_tokens_follow_every_mutation(loop: asyncio.AbstractEventLoop) -> None:
    rng = random.Random(7)
    q = TokenQueue()
    pool = [_req(loop, i, rng.randint(1, 5000), rng.randint(1, 500)) for i in range(60)]
    for _ in range(2000):
        op = rng.choice(OPS)
        if op in ("append", "appendleft"):
            getattr(q, op)(rng.choice(pool))
        elif op in ("extend", "extendleft", "iadd"):
            items = rng.sample(pool, 3)
            if op == "iadd":
                q += items
            else:
                getattr(q, op)(iter(items))  # a one-shot iterable is summed once
        elif op == "insert":
            q.insert(rng.randint(0, len(q)), rng.choice(pool))
        elif op == "self" and len(q) < 50:
            q.extend(q)
        elif op == "rotate":
            q.rotate(rng.randint(-3, 3))
        elif q and op in ("pop", "popleft"):
            getattr(q, op)()
        elif q and op == "remove":
            q.remove(rng.choice(list(q)))
        elif q and op == "del":
            del q[rng.randrange(len(q))]
        elif op == "clear" and rng.random() < 0.05:
            q.clear()
        assert q.tokens == sum(r.length for r in q)
    assert TokenQueue(pool[:5]).tokens == sum(r.length for r in pool[:5])


def test_mutations_that_would_lose_the_count_are_refused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    q = TokenQueue([_req(loop, 1, 10, 2)])
    with pytest.raises(TypeError):
        q[0] = _req(loop, 2, 3, 4)
    with pytest.raises(TypeError):
        q *= 2
    with pytest.raises(TypeError):
        TokenQueue(maxlen=3)  # type: ignore[arg-type]
    assert q.tokens == 12
