"""Prefix identity of a trace: the infinite-cache hit ratio, and the emulator's chain plan.

A trace's block ids name prefixes: equal ids mean equal content up to and including that
block (the ids are chained hashes). Two consequences used here:

- `infinite_cache_hit` is data/traces/README.md's figure: per request in arrival
  order, the longest leading run of its ids that any earlier request contained, as tokens
  capped at the prompt. Because an id occurs at one position only, that run is simply the
  number of the request's ids already seen, counted with C-speed set operations; anything
  else (a repeated id, say) falls back to walking the ids, so the definition holds for any
  input.
- `ChainPlanner` turns the ids into the block store's form: a trie of requests, compressed
  into chains (a chain is a run of blocks stored one after another) with `Fork`s where two
  prompts diverge, so a shared prefix is stored, and hit, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dualpath.model.workload.script import Fork, Workload
from dualpath.model.workload.traces.errors import TraceError


@dataclass(frozen=True, slots=True)
class HitStats:
    """Infinite-cache prefix hits of a request sequence."""

    requests: int
    hit_requests: int  # requests that reused at least one block
    tokens: int  # sum of prompts
    hit_tokens: int  # sum of min(hit blocks x block_tokens, prompt)
    blocks: int
    hit_blocks: int

    @property
    def token_ratio(self) -> float:
        return self.hit_tokens / self.tokens if self.tokens else 0.0

    @property
    def block_ratio(self) -> float:
        return self.hit_blocks / self.blocks if self.blocks else 0.0


def leading_hits(ids: Sequence[int], seen: set[int]) -> int:
    """Length of the leading run of `ids` found in `seen`."""
    k = len(seen.intersection(ids))
    # Chained ids: the k seen ones are exactly ids[:k]. Checked, not assumed (C-speed too).
    if k == 0 or (seen.issuperset(ids[:k]) and (k == len(ids) or ids[k] not in seen)):
        return k
    n = 0
    for x in ids:
        if x not in seen:
            break
        n += 1
    return n


def hit_stats(requests: Iterable[tuple[int, Sequence[int]]], block_tokens: int) -> HitStats:
    """HitStats of (prompt tokens, block ids) pairs, taken in the given (arrival) order."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    seen: set[int] = set()
    n = hit_n = tokens = hit_tokens = blocks = hit_blocks = 0
    for prompt, ids in requests:
        k = leading_hits(ids, seen)
        seen.update(ids)
        n += 1
        hit_n += k > 0
        tokens += prompt
        hit_tokens += min(k * block_tokens, prompt)
        blocks += len(ids)
        hit_blocks += k
    return HitStats(n, hit_n, tokens, hit_tokens, blocks, hit_blocks)


def infinite_cache_hit(trace: Workload) -> HitStats:
    """HitStats of a loaded trace, requests in arrival order (at_s, then session order).

    Ids are already scoped by the loader (WEKA's local ids are qualified by conversation), so
    one pass over the whole workload is the per-scope figure.
    """
    if trace.block_tokens < 1:
        raise ValueError(f"workload {trace.source!r} has no block ids (block_tokens 0)")
    order = sorted(
        ((t.at_s, i, j) for i, s in enumerate(trace.scripts) for j, t in enumerate(s.turns)),
    )
    turns = (trace.scripts[i].turns[j] for _, i, j in order)
    return hit_stats(((t.prompt, t.blocks) for t in turns), trace.block_tokens)


def block_ratio(trace_block_tokens: int, emulator_block_tokens: int) -> int:
    """Emulator blocks per trace block; the trace's block must be a whole number of them."""
    if emulator_block_tokens < 1 or trace_block_tokens % emulator_block_tokens:
        raise TraceError(
            f"engine.block_tokens: the trace's {trace_block_tokens}-token blocks must be a "
            f"whole number of emulator blocks, got {emulator_block_tokens} (use a divisor "
            f"of {trace_block_tokens}, e.g. 64)"
        )
    return trace_block_tokens // emulator_block_tokens


class _Chain:
    __slots__ = ("ids", "start")

    def __init__(self, start: int, ids: list[int]) -> None:
        self.start = start  # position (trace block) of ids[0]; below it: the parent's blocks
        self.ids = ids

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


class ChainPlanner:
    """Assigns each request (its block ids, in arrival order) the chain of its last block.

    - no match: a new root chain holding all its ids;
    - the match ends at the recorded end of a chain: it continues that chain (the usual
      next turn of a session), recording its further ids there;
    - the match ends inside a chain (another request continued it differently): a new chain,
      `Fork(new, chain, at=match*ratio)`, holding the rest;
    - the whole request matches: the chain its last block is on.

    A chain's positions are absolute (block i of the prompt is position i), so a fork's `at`
    is in the parent's own numbering. Memory: every distinct id once, in its chain's list.
    """

    def __init__(self, ratio: int = 1, base: int = 1) -> None:
        if ratio < 1 or base < 0:
            raise ValueError(f"need ratio >= 1 and base >= 0, got {ratio}, {base}")
        self.ratio = ratio
        self.base = base
        self.forks: list[Fork] = []
        self._chains: list[_Chain] = []
        self._roots: dict[int, int] = {}  # first id -> root chain
        self._branches: dict[tuple[int, int], dict[int, int]] = {}  # (chain, pos) -> id -> child

    def add(self, ids: Sequence[int]) -> int:
        """Record one request; returns the chain of its last block (a fresh one if no ids)."""
        x = list(ids)
        if not x or x[0] not in self._roots:
            return self._new(0, x, None)
        c, p = self._roots[x[0]], 0  # x[0..p] matched, x[p] lives on chain c
        while True:
            ch = self._chains[c - self.base]
            hi = min(len(x), ch.end)
            p = _common_end(x, ch, p + 1, hi) - 1
            if p == len(x) - 1:
                return c
            if p == ch.end - 1:
                ch.ids.extend(x[p + 1 :])
                return c
            child = self._branches.get((c, p), {}).get(x[p + 1])
            if child is None:
                return self._new(p + 1, x, c)
            c, p = child, p + 1

    def _new(self, start: int, x: list[int], parent: int | None) -> int:
        c = self.base + len(self._chains)
        self._chains.append(_Chain(start, x[start:]))
        if parent is None:
            if x:
                self._roots[x[0]] = c
        else:
            self._branches.setdefault((parent, start - 1), {})[x[start]] = c
            self.forks.append(Fork(c, parent, start * self.ratio))
        return c

    def recorded(self) -> dict[int, int]:
        """Emulator blocks recorded per chain (its own and inherited), so far."""
        return {self.base + i: ch.end * self.ratio for i, ch in enumerate(self._chains)}


def _common_end(x: list[int], ch: _Chain, lo: int, hi: int) -> int:
    """The first position in [lo, hi) where x and the chain differ (hi if none).

    Binary search on slice equality: a few C-speed compares instead of a Python loop over
    the ~2,000 blocks of a long prompt (a session passes every fork point of its ancestry).
    """
    off = ch.start
    if x[lo:hi] == ch.ids[lo - off : hi - off]:
        return hi
    good, bad = lo, hi  # x[lo:good] matches; x[lo:bad] does not
    while bad - good > 1:
        mid = (good + bad) // 2
        if x[good:mid] == ch.ids[good - off : mid - off]:
            good = mid
        else:
            bad = mid
    return good


@dataclass(frozen=True, slots=True)
class ChainPlan:
    chains: tuple[int, ...]  # per request: the chain of its last block
    forks: tuple[Fork, ...]  # parents before children
    recorded: dict[int, int]  # chain -> emulator blocks recorded on it


def plan_chains(requests: Iterable[Sequence[int]], ratio: int = 1, base: int = 1) -> ChainPlan:
    """The chain plan of requests' block ids in arrival order (see ChainPlanner)."""
    planner = ChainPlanner(ratio, base)
    chains = tuple(planner.add(ids) for ids in requests)
    return ChainPlan(chains, tuple(planner.forks), planner.recorded())


def owner(forks: Mapping[int, Fork], chain: int, block: int) -> tuple[int, int]:
    """(chain, block) actually holding emulator block `block` of `chain`: down the forks."""
    f = forks.get(chain)
    while f is not None and block < f.at:
        chain = f.parent
        f = forks.get(chain)
    return chain, block
