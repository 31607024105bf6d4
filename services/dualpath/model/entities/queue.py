"""A request queue that keeps the sum of its requests' `length` (len_r) as it changes.

The DE level-1 choice (paper §6.1) weighs each group by its engines' tok_e plus the tokens
waiting in its private queue. Summing a queue on every fetch is O(queue), and at paper scale
(48K agents whose first turns all queue at once) that sum was half of a run's time; the
running total makes it O(1). `length` is fixed for a request's life (prompt + gen), so the
total stays exact. Every mutator of `deque` that adds or removes an item is covered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import SupportsIndex

from dualpath.model.entities.request import Request


class TokenQueue(deque[Request]):
    """`deque[Request]` with `tokens` = Σ request.length of its items, kept exact."""

    def __init__(self, items: Iterable[Request] = (), maxlen: None = None) -> None:
        if maxlen is not None:  # a bounded deque drops items silently: never here
            raise TypeError("TokenQueue has no maxlen")
        super().__init__()
        self.tokens = 0
        self.extend(items)

    def append(self, req: Request) -> None:
        super().append(req)
        self.tokens += req.length

    def appendleft(self, req: Request) -> None:
        super().appendleft(req)
        self.tokens += req.length

    def extend(self, reqs: Iterable[Request]) -> None:
        for req in list(reqs) if reqs is self else reqs:
            self.append(req)

    def extendleft(self, reqs: Iterable[Request]) -> None:
        for req in list(reqs) if reqs is self else reqs:
            self.appendleft(req)

    def insert(self, i: int, req: Request) -> None:
        super().insert(i, req)
        self.tokens += req.length

    def pop(self) -> Request:  # type: ignore[override]  # deque.pop takes no index
        req = super().pop()
        self.tokens -= req.length
        return req

    def popleft(self) -> Request:
        req = super().popleft()
        self.tokens -= req.length
        return req

    def remove(self, req: Request) -> None:
        super().remove(req)
        self.tokens -= req.length

    def clear(self) -> None:
        super().clear()
        self.tokens = 0

    def __delitem__(self, i: SupportsIndex | slice) -> None:
        if isinstance(i, slice):
            raise TypeError("TokenQueue: slice deletion is not supported")
        self.tokens -= self[i].length
        super().__delitem__(i)

    def __setitem__(self, i: SupportsIndex | slice, req: object) -> None:
        raise TypeError("TokenQueue: items are added and removed, never replaced")

    def __imul__(self, n: int) -> TokenQueue:
        raise TypeError("TokenQueue: items are added and removed, never repeated")

    def __iadd__(self, reqs: Iterable[Request]) -> TokenQueue:
        self.extend(reqs)
        return self
