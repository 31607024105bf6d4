"""A deterministic stand-in tokenizer: real token *counts* and stable ids, no vocabulary.

Ids come from blake2b rather than Python's `hash()`, whose per-process salt would give
every scheduler replica (and every restart) different ids, hence different prefix hashes.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

VOCAB = 100_000
MAX_TOKEN_ID = 2**32 - 1  # ids are packed as uint32 when hashing blocks

# GPT-2 style: letters (with `_`), digit runs and single punctuation marks take one leading
# space with them; a whitespace run keeps its last space for the next word.
_TOKEN_RE = re.compile(r" ?[^\W\d]+| ?\d+| ?[^\w\s]|\s+(?!\S)|\s+")


def split(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def token_id(token: str) -> int:
    """blake2b (8-byte digest, big-endian) of the UTF-8 token, modulo `VOCAB`."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VOCAB


def encode(text: str, limit: int | None = None) -> list[int]:
    """Token ids of `text`; with `limit`, stops after limit + 1 ids (enough to know the text
    is too long) so an 8 MiB prompt costs no more than an allowed one."""
    ids: list[int] = []
    for match in _TOKEN_RE.finditer(text):
        ids.append(token_id(match.group()))
        if limit is not None and len(ids) > limit:
            break
    return ids


def pack(ids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(ids)}I", *ids)


def seed_of(ids: Sequence[int]) -> int:
    """A stable seed from a prompt, so the same prompt always "generates" the same text."""
    return int.from_bytes(hashlib.blake2b(pack(ids), digest_size=8).digest(), "big")


def decode_fake(n: int, seed: int) -> list[str]:
    """`n` filler output tokens; prefix-stable (token k depends only on k and `seed`), so a
    stream can emit token 0 before it knows how many tokens there will be."""
    return [f" tok{(seed + k) % VOCAB}" for k in range(n)]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


def render_message(message: ChatMessage) -> str:
    return f"<|{message.role}|>\n{message.content}\n"


def render_chat(messages: Iterable[ChatMessage]) -> str:
    return "".join(render_message(m) for m in messages)


def encode_chat(messages: Iterable[ChatMessage], limit: int | None = None) -> list[int]:
    """Token ids of `render_chat(messages)`, encoded message by message.

    Encoding per message keeps token boundaries from crossing messages, so a later turn
    that repeats earlier messages always starts with exactly their ids.
    """
    ids: list[int] = []
    for m in messages:
        ids.extend(encode(render_message(m), None if limit is None else limit - len(ids)))
        if limit is not None and len(ids) > limit:
            break
    return ids
