"""Request bodies of one session's turns, for both front-door dialects.

Native (`/v1/agent/turn`): synthetic turns send their append size and the front door keeps
the history; trace turns name their prompt's blocks by content id, so equal leading ids hit
the same KV across sessions.

OpenAI (`/v1/chat/completions`): real text. A synthetic turn appends a user message of
`append` deterministic words to the conversation and keeps the assistant's reply in it, so
each prompt extends the previous one and the reused prefix shows up as
`usage.prompt_tokens_details.cached_tokens`. A trace turn renders every block id as
`block_tokens` words derived from the id alone (equal ids -> equal text -> equal block
hashes in the front door) plus filler words for the tail.

Words are lowercase letters only: the front door's tokenizer makes each " word" one token,
so n words are n prompt tokens (plus a few for the chat template).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

from dualpath.loadgen.scripts import ScriptTurn

_MASK = (1 << 64) - 1
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _mix(x: int) -> int:
    """splitmix64 finalizer: a cheap, well-spread integer hash (stable across processes)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _word(x: int) -> str:
    h = _mix(x)
    n = 3 + h % 5  # 3..7 letters
    h >>= 3
    chars = []
    for _ in range(n):
        chars.append(_LETTERS[h % 26])
        h //= 26
    return "".join(chars)


def seed_of(*parts: object) -> int:
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def words(seed: int, n: int) -> str:
    """`n` deterministic words, each with its leading space."""
    return "".join(" " + _word(seed * 1_000_003 + j) for j in range(n))


@lru_cache(maxsize=65_536)
def block_text(block_id: int, block_tokens: int) -> str:
    """The text of one content block: depends on the id only."""
    return words(seed_of("block", block_id), block_tokens)


def native_body(key: str, i: int, turn: ScriptTurn, block_tokens: int) -> dict[str, Any]:
    if turn.blocks:
        return {
            "session": key,
            "turn": i,
            "prompt_tokens": turn.prompt,
            "block_ids": list(turn.blocks),
            "block_tokens": block_tokens,
            "gen_tokens": turn.gen,
        }
    return {"session": key, "turn": i, "append_tokens": turn.append, "gen_tokens": turn.gen}


class Conversation:
    """One session's chat history in the OpenAI dialect."""

    def __init__(self, key: str, block_tokens: int) -> None:
        self.key = key
        self.block_tokens = block_tokens
        self.messages: list[dict[str, str]] = []

    def body(self, i: int, turn: ScriptTurn, model: str | None = None) -> dict[str, Any]:
        if turn.blocks:
            # A trace prompt is its blocks: the whole prompt is named by ids, not appended.
            messages = [{"role": "user", "content": self._block_prompt(i, turn)}]
            body: dict[str, Any] = {"messages": messages}
        else:
            content = words(seed_of(self.key, i), max(1, turn.append))
            self.messages.append({"role": "user", "content": content})
            # `user` keys the conversation (an affinity hint, as real clients send).
            body = {"messages": self.messages, "user": self.key}
        body["max_tokens"] = turn.gen
        if model is not None:
            body["model"] = model
        return body

    def reply(self, turn: ScriptTurn, text: str) -> None:
        """Keep the assistant's answer: the next prompt repeats it verbatim."""
        if not turn.blocks:
            self.messages.append({"role": "assistant", "content": text})

    def _block_prompt(self, i: int, turn: ScriptTurn) -> str:
        bt = self.block_tokens
        full = min(len(turn.blocks), turn.prompt // bt)
        parts = [block_text(b, bt) for b in turn.blocks[:full]]
        tail = turn.prompt - full * bt
        if tail > 0:
            parts.append(words(seed_of(self.key, i, "tail"), tail))
        return "".join(parts)
