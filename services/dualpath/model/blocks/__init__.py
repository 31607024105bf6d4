"""KV blocks: sizes, session hash chains, range digests and the block store's pure model.

No I/O here. A block is identified by (session, index) and its chained hash; runs of blocks
travel as `BlockRange`s with an O(1) digest, so a paper-scale run (~10^6 blocks persisted,
~10^8 block reads) never creates per-block Python objects. See docs/blocks.md.
"""

from dualpath.model.blocks.chain import MASK64, ChainRegistry, SessionChain
from dualpath.model.blocks.errors import BlockCorrupted, BlockError, BlockGap, BlockMissing
from dualpath.model.blocks.range import (
    DEFAULT_BLOCK_TOKENS,
    BlockRange,
    full_block_bytes,
    full_blocks,
    layer_block_bytes,
)
from dualpath.model.blocks.store import BlockStore

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "MASK64",
    "BlockCorrupted",
    "BlockError",
    "BlockGap",
    "BlockMissing",
    "BlockRange",
    "BlockStore",
    "ChainRegistry",
    "SessionChain",
    "full_block_bytes",
    "full_blocks",
    "layer_block_bytes",
]
