"""Errors of the block layer: each names the session and blocks involved."""

from __future__ import annotations

from dualpath.model.blocks.range import BlockRange


class BlockError(Exception):
    """Base class: something is wrong with a session's stored KV blocks."""


class BlockMissing(BlockError):  # noqa: N818 -- public name, used across the project
    """A read asked for a block the store does not hold (a hit that earlier turns never made)."""

    def __init__(self, rng: BlockRange, first_missing: int) -> None:
        super().__init__(f"{rng}: block {first_missing} is not stored")
        self.rng = rng
        self.first_missing = first_missing

    def __reduce__(self) -> tuple[type[BlockMissing], tuple[BlockRange, int]]:
        return (type(self), (self.rng, self.first_missing))


class BlockGap(BlockError, ValueError):  # noqa: N818 -- matches its siblings
    """A persist would leave a hole: a session's blocks are stored as one leading run."""

    def __init__(self, rng: BlockRange, stored: int) -> None:
        super().__init__(f"{rng}: cannot persist past a gap, only blocks [0, {stored}) are stored")
        self.rng = rng
        self.stored = stored

    def __reduce__(self) -> tuple[type[BlockGap], tuple[BlockRange, int]]:
        return (type(self), (self.rng, self.stored))


class BlockCorrupted(BlockError):  # noqa: N818 -- public name, used across the project
    """A digest does not match the chain: the data was damaged in the store or in flight.

    `block` is the first stored block whose checksum is wrong, or None when the store's copy
    is intact (so the damage happened to the digest on its way, or the producer sent garbage).
    """

    def __init__(
        self, rng: BlockRange, expected: int, actual: int, block: int | None, where: str
    ) -> None:
        culprit = f"first bad block {block}" if block is not None else "stored blocks intact"
        super().__init__(
            f"{rng}: {where} digest {actual:#018x} != expected {expected:#018x} ({culprit})"
        )
        self.rng = rng
        self.expected = expected
        self.actual = actual
        self.block = block
        self.where = where

    def __reduce__(
        self,
    ) -> tuple[type[BlockCorrupted], tuple[BlockRange, int, int, int | None, str]]:
        return (type(self), (self.rng, self.expected, self.actual, self.block, self.where))
