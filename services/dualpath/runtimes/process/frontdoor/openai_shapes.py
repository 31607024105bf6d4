"""OpenAI response objects (`text_completion`, `chat.completion[.chunk]`) for a turn.

Every body and the last stream chunk also carry `dualpath`: the emulated timings of the
turn, which an OpenAI client cannot otherwise see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dualpath.runtimes.process.frontdoor.backend import TurnResult
from dualpath.runtimes.process.frontdoor.metrics import timings

CHUNK_TOKENS = 64  # a tail known all at once goes out in a few chunks of this many tokens

Obj = dict[str, Any]


def usage(r: TurnResult) -> Obj:
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.generated_tokens,
        "total_tokens": r.prompt_tokens + r.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
    }


def dualpath(r: TurnResult) -> Obj:
    return {
        "session": r.session,
        "turn": r.turn,
        "request_id": r.request_id,
        "read_path": r.read_path,
        "cached_tokens": r.cached_tokens,
        **timings(r),
    }


@dataclass(frozen=True, slots=True)
class Shape:
    """Builds the bodies of one request; `chat` picks the chat or the legacy object family."""

    chat: bool
    id: str
    created: int
    model: str
    include_usage: bool = False

    def full(self, text: str, r: TurnResult) -> Obj:
        choice: Obj = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text, "refusal": None}
        else:
            choice["text"] = text
        body = self._head("chat.completion" if self.chat else "text_completion")
        return {**body, "choices": [choice], "usage": usage(r), "dualpath": dualpath(r)}

    def first(self, token: str) -> list[Obj]:
        if self.chat:
            return [self._chunk({"role": "assistant", "content": ""}), self._chunk(token)]
        return [self._chunk(token)]

    def more(self, tokens: list[str]) -> list[Obj]:
        """Tokens of a stream as they are generated (not the last: `rest` ends it)."""
        return [self._chunk("".join(tokens))]

    def rest(self, tokens: list[str], result: TurnResult) -> list[Obj]:
        groups = [tokens[i : i + CHUNK_TOKENS] for i in range(0, len(tokens), CHUNK_TOKENS)]
        texts = ["".join(g) for g in groups] or [""]
        out = [self._chunk(t) for t in texts[:-1]]
        out.append(self._chunk(texts[-1], finish="length"))
        if self.include_usage:
            # OpenAI semantics: the usage chunk comes last and has no choices.
            last = {**self._head(self._chunk_object()), "choices": [], "usage": usage(result)}
            out.append(last)
        out[-1]["dualpath"] = dualpath(result)
        return out

    def _chunk(self, content: str | Obj, finish: str | None = None) -> Obj:
        choice: Obj = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.chat:
            choice["delta"] = content if isinstance(content, dict) else {"content": content}
        else:
            choice["text"] = content
        chunk = {**self._head(self._chunk_object()), "choices": [choice]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _head(self, obj: str) -> Obj:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}
