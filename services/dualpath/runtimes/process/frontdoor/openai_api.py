"""OpenAI-compatible endpoints: /v1/models, /v1/completions, /v1/chat/completions.

Sampling fields (temperature, top_p, stop, seed, ...) are accepted and ignored: the
emulation produces filler text whose only meaningful property is its length, in tokens of
the served tokenizer (`Codec`: the stand-in, or `--tokenizer`'s).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from dualpath.runtimes.process.frontdoor import params
from dualpath.runtimes.process.frontdoor.backend import Hangups, TurnSpec
from dualpath.runtimes.process.frontdoor.errors import ApiError, bad_param
from dualpath.runtimes.process.frontdoor.openai_shapes import Shape
from dualpath.runtimes.process.frontdoor.sessions import PrefixSessions, block_hashes
from dualpath.runtimes.process.frontdoor.sse import stream_turn
from dualpath.runtimes.process.frontdoor.tokenizer import (
    MAX_TOKEN_ID,
    ChatMessage,
    Codec,
    StandIn,
    encode_chat,
    seed_of,
)
from dualpath.runtimes.process.frontdoor.turns import Limits, TurnRunner

ROLES = ("system", "user", "assistant", "tool", "developer")
PROMPT_FORMS = (
    "'prompt' must be a string, a non-empty list of token ids (integers 0..2^32-1), "
    "or a list holding exactly one string"
)
Prompt = tuple[list[int], list[bytes]]  # token ids, hashes of their full blocks
# When the request arrived: reading, parsing and tokenizing its body are part of its TTFT,
# as they are of what a benchmark client measures (and of a real server's: it tokenizes too).
RECEIVED = web.RequestKey("dualpath_received", float)


class OpenAIApi:
    def __init__(
        self,
        limits: Limits,
        sessions: PrefixSessions,
        runner: TurnRunner,
        reader: params.BodyReader,
        hangups: Hangups,
        codec: Codec | None = None,
    ) -> None:
        self._codec: Codec = codec or StandIn()
        self._limits = limits
        self._sessions = sessions
        self._runner = runner
        self._reader = reader
        self._hangups = hangups
        self._created = int(time.time())

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self._limits.model,
            "object": "model",
            "created": self._created,
            "owned_by": "dualpath-testbed",
        }
        return web.json_response({"object": "list", "data": [model]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        request[RECEIVED] = time.perf_counter()
        body, prompt = await self._reader.read(request, self._completion_prompt)
        gen = params.opt_int(
            body, "max_tokens", self._default_gen(), 1, self._limits.max_gen_tokens
        )
        return await self._serve(request, body, prompt, gen, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        request[RECEIVED] = time.perf_counter()
        body, prompt = await self._reader.read(request, self._chat_prompt)
        hi = self._limits.max_gen_tokens
        # max_completion_tokens is the current name; max_tokens the deprecated one.
        gen = params.opt_int(body, "max_tokens", self._default_gen(), 1, hi)
        gen = params.opt_int(body, "max_completion_tokens", gen, 1, hi)
        return await self._serve(request, body, prompt, gen, chat=True)

    # The two extractors run in the body reader's thread for big bodies: pure, and they pop
    # the prompt out of the body so its (maybe huge) JSON value is freed there too.
    def _completion_prompt(self, body: params.Body) -> Prompt:
        self._common_checks(body)
        limit = self._limits.max_prompt_tokens
        return self._hashed(prompt_ids(body.pop("prompt", None), limit, self._codec))

    def _chat_prompt(self, body: params.Body) -> Prompt:
        self._common_checks(body)
        limit = self._limits.max_prompt_tokens
        messages = body.pop("messages", None)
        if isinstance(messages, list) and len(messages) > limit:  # each is >= 1 token
            raise too_long("messages", limit)
        return self._hashed(encode_chat(parse_messages(messages), limit, self._codec))

    def _hashed(self, ids: list[int]) -> Prompt:
        if not 1 <= len(ids) <= self._limits.max_prompt_tokens:
            return ids, []  # refused by _check_length: not worth hashing
        return ids, block_hashes(ids, self._limits.block_tokens)

    def _common_checks(self, body: params.Body) -> None:
        params.check_model(body, self._limits.model)
        params.check_n(body)

    def _default_gen(self) -> int:
        return min(16, self._limits.max_gen_tokens)

    async def _serve(
        self, request: web.Request, body: params.Body, prompt: Prompt, gen: int, *, chat: bool
    ) -> web.StreamResponse:
        ids, hashes = prompt
        stream = params.opt_bool(body, "stream")
        usage = params.include_usage(body)
        params.affinity(request, body)  # validated; a routing hint only (content decides)
        self._check_length(ids, "messages" if chat else "prompt")
        # Front-door admission before placing, so our own 429 does not advance a chain
        # (a backend refusal later still does: that chain's next turn index skips one).
        self._runner.check_capacity()
        place = self._sessions.place(hashes)
        spec = TurnSpec(place.session, place.turn, len(ids), gen, place.lineage, request[RECEIVED])
        seed = seed_of(ids)
        codec = self._codec
        prefix = "chatcmpl" if chat else "cmpl"
        shape = Shape(
            chat, f"{prefix}-{uuid.uuid4().hex}", int(time.time()), self._limits.model, usage
        )
        if stream:
            return await stream_turn(
                request, self._runner, spec, lambda n: codec.output(n, seed), shape, self._hangups
            )
        task = self._runner.start(spec)
        result = await self._hangups.follow(spec, task, lambda: request.transport is None)
        text = "".join(codec.output(result.generated_tokens, seed))
        return web.json_response(shape.full(text, result))

    def _check_length(self, ids: list[int], param: str) -> None:
        limit = self._limits.max_prompt_tokens
        if not ids:
            raise bad_param(param, f"'{param}' must contain at least one token")
        if len(ids) > limit:
            raise too_long(param, limit)


def too_long(param: str, limit: int) -> ApiError:
    return bad_param(param, f"'{param}' is longer than the limit of {limit} tokens; shorten it")


def prompt_ids(prompt: Any, limit: int, codec: Codec | None = None) -> list[int]:
    """Token ids of the prompt; like `encode`, at most limit + 1 of them (enough to refuse)."""
    encode = (codec or StandIn()).encode
    if isinstance(prompt, str):
        return encode(params.text("prompt", prompt), limit)
    if isinstance(prompt, list) and prompt:
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return encode(params.text("prompt", prompt[0]), limit)
        head = prompt[: limit + 1]
        if all(_is_token_id(t) for t in head):
            return head
    raise bad_param("prompt", PROMPT_FORMS)


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_ID


def parse_messages(value: Any) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise bad_param("messages", "'messages' must be a non-empty list of {role, content}")
    return [_message(f"messages[{i}]", m) for i, m in enumerate(value)]


def _message(where: str, message: Any) -> ChatMessage:
    if not isinstance(message, dict):
        raise bad_param(where, f"'{where}' must be an object with 'role' and 'content'")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad_param(f"{where}.role", f"'{where}.role' must be one of {', '.join(ROLES)}")
    return ChatMessage(role, _content(f"{where}.content", message.get("content"), role))


def _content(where: str, content: Any, role: str) -> str:
    if isinstance(content, str):
        return params.text(where, content)
    if content is None and role == "assistant":
        return ""  # an assistant turn that only made tool calls has no text
    if isinstance(content, list):
        texts: list[str] = []
        for j, part in enumerate(content):
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise bad_param(
                    f"{where}[{j}]", f"'{where}[{j}]' must be a text part {{type: text, text}}"
                )
            texts.append(params.text(f"{where}[{j}].text", part["text"]))
        return "".join(texts)
    raise bad_param(where, f"'{where}' must be a string or a list of text parts")
