"""A deterministic stand-in tokenizer: real token *counts* and stable ids, no vocabulary.

Ids come from blake2b rather than Python's `hash()`, whose per-process salt would give
every scheduler replica (and every restart) different ids, hence different prefix hashes.
The output text is common English words, each one token under this splitter *and* under the
usual BPE and WordPiece vocabularies, so a benchmark client that re-tokenizes the stream
counts what was emulated. `Codec` is what the front door needs of a tokenizer; a real one
(`--tokenizer`) is `frontdoor.hf_tokenizer.HfCodec`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

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
    # C-level loops only (islice, map), and one hash per distinct token (text repeats its
    # tokens): this runs in the body thread, holding the GIL the event loop paces streams with
    matches = _TOKEN_RE.finditer(text)
    head = matches if limit is None else itertools.islice(matches, limit + 1)
    tokens = list(map(re.Match.group, head))
    table = {token: token_id(token) for token in set(tokens)}
    return list(map(table.__getitem__, tokens))


def pack(ids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(ids)}I", *ids)


def seed_of(ids: Sequence[int]) -> int:
    """A stable seed from a prompt, so the same prompt always "generates" the same text."""
    return int.from_bytes(hashlib.blake2b(pack(ids), digest_size=8).digest(), "big")


# Common English words: as " word" each is one token in byte-level BPE vocabularies (Ġword)
# and in BERT's WordPiece ones. Checked for the two the tests ship, Claude's BPE and
# all-MiniLM's uncased WordPiece (tests/runtimes/process/frontdoor/test_hf_tokenizer.py);
# lowercase ASCII, so no normalizer (NFKC, lowercasing) changes them.
_WORDS = """the of and to in is was it for on that with as by at from his he be this are an or had
    not but which have were her one they all she there been their has would more who when will
    into its up him other time out can some so them what about than only two also over then
    these could no new first may like my people any after most made where years such many just
    way well back even because much through before see must get still us make very good own
    down long great should those same while how day being both work last between under each
    three never world here year part might life old state did take place high another around
    city since right small come few again home house end public went four know large found
    water national used use every little often want left several best war group country school
    family help whole put later head side major almost away night point government system form
    set less against general line number until during music early though second show light
    series name area along local power court think give open told order among once thing
    however play south north west east red black white young far"""
WORDS = tuple(_WORDS.split())


def decode_fake(n: int, seed: int) -> list[str]:
    """`n` filler output tokens (" word"); prefix-stable (token k depends only on k and
    `seed`), so a stream can emit token 0 before it knows how many tokens there will be."""
    return [" " + WORDS[(seed + k) % len(WORDS)] for k in range(n)]


class Codec(Protocol):
    """What the front door needs of a tokenizer: prompt ids (at most limit + 1 of them, enough
    to refuse a long prompt) and `n` output token texts, prefix-stable in `n`, whose
    concatenation re-encodes to exactly `n` tokens."""

    name: str

    def encode(self, text: str, limit: int | None = None) -> list[int]: ...

    def output(self, n: int, seed: int) -> list[str]: ...


class StandIn:
    """The offline default: the regex splitter above, blake2b ids, `WORDS` as output."""

    name = "stand-in"

    def encode(self, text: str, limit: int | None = None) -> list[int]:
        return encode(text, limit)

    def output(self, n: int, seed: int) -> list[str]:
        return decode_fake(n, seed)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


def render_message(message: ChatMessage) -> str:
    return f"<|{message.role}|>\n{message.content}\n"


def render_chat(messages: Iterable[ChatMessage]) -> str:
    return "".join(render_message(m) for m in messages)


def encode_chat(
    messages: Iterable[ChatMessage], limit: int | None = None, codec: Codec | None = None
) -> list[int]:
    """Token ids of `render_chat(messages)`, encoded message by message (by `codec`, the
    stand-in if None).

    Encoding per message keeps token boundaries from crossing messages, so a later turn
    that repeats earlier messages always starts with exactly their ids.
    """
    ids: list[int] = []
    for m in messages:
        text = render_message(m)
        left = None if limit is None else limit - len(ids)
        ids.extend(encode(text, left) if codec is None else codec.encode(text, left))
        if limit is not None and len(ids) > limit:
            break
    return ids
