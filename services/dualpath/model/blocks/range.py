"""`BlockRange`: a run of consecutive KV blocks of one session, and block-size arithmetic.

A session's token stream only grows, so block i always covers tokens [i*bt, (i+1)*bt) with
bt = `block_tokens` (64 by default, paper A.5). Everything that moves or stores KV talks in
ranges rather than per-block objects: a paper-scale run touches ~10^8 block reads, and one
small frozen object per run of blocks keeps that cheap.
"""

from __future__ import annotations

DEFAULT_BLOCK_TOKENS = 64


class BlockRange:
    """Blocks [start, stop) of `session` (stop exclusive). Immutable, equal and hashed by
    value.

    A plain class, not a frozen dataclass: a frozen dataclass's generated `__init__` runs
    interpreted even in a compiled build, and a paper-scale run makes millions of ranges.
    `object.__setattr__` with a literal name compiles to a plain field store (mypyc)."""

    __slots__ = ("session", "start", "stop")
    session: int
    start: int
    stop: int

    def __init__(self, session: int, start: int, stop: int) -> None:
        if session < 0:
            raise ValueError(f"BlockRange: session must be >= 0, got {session}")
        if not 0 <= start <= stop:
            raise ValueError(f"BlockRange: need 0 <= start <= stop, got [{start}, {stop})")
        object.__setattr__(self, "session", session)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"BlockRange is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[type[BlockRange], tuple[int, int, int]]:
        return BlockRange, (self.session, self.start, self.stop)  # pickled through __init__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BlockRange):
            return NotImplemented
        return (
            self.session == other.session and self.start == other.start and self.stop == other.stop
        )

    def __hash__(self) -> int:
        return hash((self.session, self.start, self.stop))

    def __repr__(self) -> str:
        return f"BlockRange(session={self.session}, start={self.start}, stop={self.stop})"

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def nblocks(self) -> int:
        return self.stop - self.start

    def __str__(self) -> str:
        return f"session {self.session} blocks [{self.start}, {self.stop})"

    def tokens(self, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
        """Tokens covered by the range."""
        return self.nblocks * block_tokens


def full_blocks(tokens: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Complete blocks in the first `tokens` tokens: only these are ever persisted or hit."""
    _check_positive("block_tokens", block_tokens)
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return tokens // block_tokens


def layer_block_bytes(
    kv_bytes_per_token_layer: int, block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> int:
    """Bytes of one Layer Block, shape [1, tokens, bytes] (paper A.5)."""
    _check_positive("kv_bytes_per_token_layer", kv_bytes_per_token_layer)
    _check_positive("block_tokens", block_tokens)
    return kv_bytes_per_token_layer * block_tokens


def full_block_bytes(
    kv_bytes_per_token_layer: int, layers: int, block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> int:
    """Bytes of one Full Block, shape [layer, tokens, bytes]: `layers` Layer Blocks end to end."""
    _check_positive("layers", layers)
    return layers * layer_block_bytes(kv_bytes_per_token_layer, block_tokens)


def _check_positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
