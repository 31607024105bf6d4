"""A real tokenizer from local files (`frontdoor.tokenizer`, `--tokenizer NAME_OR_PATH`).

Loaded with the `tokenizers` library from a `tokenizer.json`, as vLLM's fast tokenizers are.
Nothing is downloaded: the setting names a `tokenizer.json`, a folder holding one, or a
Hugging Face model name already in the local hub cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`,
`~/.cache/huggingface/hub`).

Prompts are counted without special tokens (BOS, [CLS]/[SEP]): what a benchmark client that
built a prompt of N tokens counts. Output tokens are drawn from a pool of the vocabulary's
whole words whose text round-trips: " word" encodes to exactly that one id, alone and
repeated. The pool is taken in id order (BPE merges and BERT vocabularies put common words
first), so it is deterministic and made of frequent words.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tokenizers import Tokenizer

SETTING = "frontdoor.tokenizer"
POOL_MAX = 4096  # round-tripping words kept; the most frequent come first
MIN_POOL = 64  # fewer than this: not a vocabulary of words (refused, see `_pool`)
_WORD = re.compile(r" [a-z]{2,}")  # lowercase ASCII: no normalizer (NFKC, lowercase) alters it


class TokenizerError(ValueError):
    """A tokenizer that cannot be found or loaded; the message is one line naming the setting."""


class HfCodec:
    """`frontdoor.tokenizer.Codec` over a `tokenizers.Tokenizer`."""

    def __init__(self, tokenizer: Tokenizer, name: str) -> None:
        # A tokenizer.json may carry the padding/truncation its model was trained with
        # (all-MiniLM's pads to 128): a server counting prompts must do neither.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tok = tokenizer
        self.name = name
        self.pool = _pool(tokenizer, name)

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    def encode(self, text: str, limit: int | None = None) -> list[int]:
        # encode_batch, not encode: it lets go of the GIL while it works (a 40k-token prompt
        # held it ~140 ms with `encode`, stalling every stream the event loop paces)
        ids: list[int] = self._tok.encode_batch([text], add_special_tokens=False)[0].ids
        return ids if limit is None else ids[: limit + 1]

    def output(self, n: int, seed: int) -> list[str]:
        pool = self.pool
        return [pool[(seed + k) % len(pool)] for k in range(n)]


def load_tokenizer(spec: str) -> HfCodec:
    """Resolve and load `spec`; raises `TokenizerError` (one line) if it cannot."""
    path = resolve(spec)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception for a bad file
        reason = " ".join(str(exc).split())[:200]
        raise TokenizerError(
            f"{SETTING}={spec!r}: {path} is not a loadable tokenizer.json ({reason}); "
            "give the tokenizer.json of a Hugging Face model (a fast tokenizer)"
        ) from None
    return HfCodec(tokenizer, spec)


def resolve(spec: str) -> Path:
    """The tokenizer.json that `spec` names (a file, a folder, or a cached hub model)."""
    if not spec.strip():
        raise TokenizerError(f"{SETTING}: empty; give a tokenizer.json, a folder or a model")
    path = Path(spec).expanduser()
    if path.is_dir():
        found = path / "tokenizer.json"
        if not found.is_file():
            raise TokenizerError(
                f"{SETTING}={spec!r}: the folder has no tokenizer.json (only fast tokenizers "
                "are supported: export one with transformers' save_pretrained)"
            )
        return found
    if path.is_file():
        return path
    cached = _hub_cache(spec)
    if cached is None:
        raise TokenizerError(
            f"{SETTING}={spec!r}: no such file or folder, and no such model in the local "
            "Hugging Face cache (nothing is downloaded); give a tokenizer.json or its folder"
        )
    return cached


def _hub_cache(name: str) -> Path | None:
    """`org/model` in the local hub cache: its `main` snapshot, else any snapshot."""
    if "/" in name and name.count("/") > 1:
        return None
    home = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()
    root = Path(os.environ.get("HF_HUB_CACHE", home / "hub")).expanduser()
    repo = root / ("models--" + name.replace("/", "--"))
    ref = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    snapshots += sorted((repo / "snapshots").glob("*")) if (repo / "snapshots").is_dir() else []
    return next((s / "tokenizer.json" for s in snapshots if (s / "tokenizer.json").is_file()), None)


def _pool(tok: Tokenizer, name: str) -> list[str]:
    """Texts " word" of whole-word tokens that round-trip, alone and next to each other."""
    ids = list(range(tok.get_vocab_size()))
    texts = [t if t.startswith(" ") else " " + t for t in tok.decode_batch([[i] for i in ids])]
    cands = [(i, t) for i, t in zip(ids, texts, strict=True) if _WORD.fullmatch(t)]
    alone = tok.encode_batch([t for _, t in cands], add_special_tokens=False)
    twice = tok.encode_batch([t + t for _, t in cands], add_special_tokens=False)
    pool = [
        t
        for (i, t), a, b in zip(cands, alone, twice, strict=True)
        if a.ids == [i] and b.ids == [i, i]
    ][:POOL_MAX]
    # The whole pool in a row must come back token for token, as a stream's text will.
    if len(pool) < MIN_POOL or len(tok.encode("".join(pool), add_special_tokens=False)) != len(
        pool
    ):
        raise TokenizerError(
            f"{SETTING}={name!r}: found {len(pool)} whole-word tokens whose text re-encodes "
            f"to themselves (need {MIN_POOL}); its output could not be counted back"
        )
    return pool
