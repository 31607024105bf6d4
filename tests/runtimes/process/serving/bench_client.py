"""A serving-benchmark client of our own, counting the way public ones do (vLLM's
`vllm bench serve`, SGLang's bench_serving, genai-perf/aiperf):

- output tokens: the streamed text of a request re-encoded by the tokenizer, without special
  tokens (vLLM: `len(tokenizer(text, add_special_tokens=False).input_ids)`);
- TTFT: from sending the request to its first content chunk;
- ITL: the gaps between content chunk arrivals, their mean pooled over all requests
  (Σ(last - first token) / Σ(n - 1), vLLM's mean ITL); a request's TPOT is its mean gap
  after the second token (the report's definition: TTST, the first gap, is the KV hand-over);
- request throughput: completed requests / (last response end - first request sent).

It speaks raw HTTP + SSE through aiohttp (no SDK whose own parsing would delay the first
chunk) and posts `/v1/completions`, so a prompt of N tokens is N tokens to the server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dualpath.runtimes.process.frontdoor.tokenizer import WORDS

Count = Callable[[str], int]  # tokens in a text, as the client's tokenizer counts them


@dataclass(frozen=True, slots=True)
class Req:
    prompt: str
    max_tokens: int
    at_s: float = 0.0  # send time, from the start of the run


@dataclass(slots=True)
class Outcome:
    sent: float
    chunks: list[float] = field(default_factory=list)  # arrival of each content chunk
    pieces: list[str] = field(default_factory=list)  # the text of each
    usage: dict[str, Any] = field(default_factory=dict)
    emulated: dict[str, Any] = field(default_factory=dict)  # the turn's own `dualpath` timings
    done: float = 0.0

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def ttft(self) -> float:
        return self.chunks[0] - self.sent

    def tpot(self, count: Count) -> float | None:
        """(last token - second token) / (n - 2): the mean gap after the second token, each
        token timed by the chunk that brought it (a late writer may put several in one)."""
        seen, second = 0, None
        for at, piece in zip(self.chunks, self.pieces, strict=True):
            seen += count(piece)
            if second is None and seen >= 2:
                second = at
        if seen < 3 or second is None:
            return None
        return (self.chunks[-1] - second) / (seen - 2)


def _words(n: int, seed: object) -> list[str]:
    rng = random.Random(str(seed))
    return [rng.choice(WORDS) for _ in range(n)]


def words(n: int, seed: object) -> str:
    """`n` words that are one token each under the stand-in, BPE and WordPiece tokenizers."""
    return "".join(" " + w for w in _words(n, seed))


def fixed_requests(n: int, prompt_tokens: int, max_tokens: int, gap_s: float) -> list[Req]:
    """Distinct prompts of one length (no prefix shared), sent `gap_s` apart."""
    return [Req(words(prompt_tokens, ("fixed", i)), max_tokens, i * gap_s) for i in range(n)]


def mooncake_requests(
    rows: Sequence[dict[str, Any]], block: int = 512, slowdown: float = 1.0
) -> list[Req]:
    """A Mooncake-format slice: each hash id names a block of `block` tokens (equal ids, equal
    blocks, so shared prefixes hit the cache), sent at the trace's timestamps (ms) times
    `slowdown` (SGLang's `--mooncake-slowdown-factor`)."""
    t0 = rows[0]["timestamp"]
    out = []
    for row in rows:
        tokens = [w for h in row["hash_ids"] for w in _words(block, ("block", h))]
        prompt = "".join(" " + w for w in tokens[: row["input_length"]])
        out.append(Req(prompt, row["output_length"], (row["timestamp"] - t0) / 1e3 * slowdown))
    return out


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, req: Req, start: float
) -> Outcome:
    body = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,  # what benchmark clients send; accepted and ignored here
    }
    data = json.dumps(body).encode()  # before the clock starts, as the benchmarks do
    await asyncio.sleep(max(0.0, start + req.at_s - time.perf_counter()))
    out = Outcome(time.perf_counter())
    headers = {"Content-Type": "application/json"}
    async with session.post(url, data=data, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            now = time.perf_counter()
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                out.usage = chunk["usage"]
            if "dualpath" in chunk:
                out.emulated = chunk["dualpath"]
            for choice in chunk.get("choices", []):
                if choice.get("text"):
                    out.chunks.append(now)
                    out.pieces.append(choice["text"])
    out.done = time.perf_counter()
    return out


def run(http_addr: str, model: str, reqs: Sequence[Req]) -> list[Outcome]:
    async def main() -> list[Outcome]:
        url = f"http://{http_addr}/v1/completions"
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            start = time.perf_counter() + 0.05
            return list(await asyncio.gather(*(_one(session, url, model, r, start) for r in reqs)))

    return asyncio.run(main())


@dataclass(frozen=True, slots=True)
class Summary:
    completed: int
    output_tokens: int
    usage_mismatches: int
    ttft_median_s: float
    ttft_mean_s: float
    tpot_median_s: float
    tpot_mean_s: float
    itl_mean_s: float  # every gap after a first token, pooled: Σ(last - first) / Σ(n - 1)
    itl_median_s: float  # over every gap between content chunks after the second token
    request_per_s: float


def summarize(outcomes: Sequence[Outcome], count: Count) -> Summary:
    counts = [count(o.text) for o in outcomes]
    usage = [o.usage.get("completion_tokens") for o in outcomes]
    mismatches = sum(c != u for c, u in zip(counts, usage, strict=True))
    tpots = [t for o in outcomes if (t := o.tpot(count)) is not None]
    gaps = [b - a for o in outcomes for a, b in itertools.pairwise(o.chunks[1:])]
    ttfts = [o.ttft for o in outcomes]
    decoding = sum(
        o.chunks[-1] - o.chunks[0] for o, c in zip(outcomes, counts, strict=True) if c > 1
    )
    itl_gaps = sum(c - 1 for c in counts if c > 1)
    span = max(o.done for o in outcomes) - min(o.sent for o in outcomes)
    return Summary(
        completed=len(outcomes),
        output_tokens=sum(counts),
        usage_mismatches=mismatches,
        ttft_median_s=statistics.median(ttfts),
        ttft_mean_s=statistics.fmean(ttfts),
        tpot_median_s=statistics.median(tpots),
        tpot_mean_s=statistics.fmean(tpots),
        itl_mean_s=decoding / itl_gaps,
        itl_median_s=statistics.median(gaps),
        request_per_s=len(outcomes) / span,
    )
