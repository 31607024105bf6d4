"""The stand-in tokenizer: stable ids, GPT-2-like splitting, prefix-preserving chat."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from dualpath.runtimes.process.frontdoor import (
    ChatMessage,
    decode_fake,
    encode,
    encode_chat,
    render_chat,
)
from dualpath.runtimes.process.frontdoor.tokenizer import split, token_id


def _expected_id(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 100_000


def test_split_attaches_spaces_to_the_following_word() -> None:
    assert split("Hello, world 42!") == ["Hello", ",", " world", " 42", "!"]
    assert split("a  b\n") == ["a", " ", " b", "\n"]
    assert "".join(split("x_y = f(1.5)\t\n  z")) == "x_y = f(1.5)\t\n  z"


def test_ids_are_blake2b_not_python_hash() -> None:
    assert encode("Hello world") == [_expected_id("Hello"), _expected_id(" world")]
    assert token_id("\u00e9t\u00e9") == _expected_id("\u00e9t\u00e9")
    assert all(0 <= i < 100_000 for i in encode("some text, with 123 numbers"))


def test_ids_are_the_same_in_another_process() -> None:
    code = (
        "from dualpath.runtimes.process.frontdoor import encode; "
        "print(encode('Hello world, again!'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == str(encode("Hello world, again!"))


def test_encode_limit_stops_early() -> None:
    assert len(encode("a " * 1000, limit=10)) == 11
    assert encode("a b", limit=10) == encode("a b")


def test_decode_fake_is_deterministic_and_prefix_stable() -> None:
    assert decode_fake(5, 7) == decode_fake(5, 7)
    assert decode_fake(5, 7)[:2] == decode_fake(2, 7)
    assert decode_fake(3, 7) != decode_fake(3, 8)
    assert all(t.startswith(" ") for t in decode_fake(3, 0))


def test_chat_rendering_and_prefix_sharing() -> None:
    first = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi there ")]
    assert render_chat(first) == "<|system|>\nBe brief.\n<|user|>\nHi there \n"
    second = [*first, ChatMessage("assistant", "Hello."), ChatMessage("user", "More?")]
    ids1, ids2 = encode_chat(first), encode_chat(second)
    assert ids2[: len(ids1)] == ids1  # even though "Hi there " ends with a space
    assert len(encode_chat(second, limit=3)) == 4


def test_stand_in_output_is_one_token_per_word_here_too() -> None:
    text = "".join(decode_fake(300, 99))
    assert len(encode(text)) == 300 == len(text.split())
