"""The names of cached KV blocks, the same on both sides of the link.

An engine caches a prompt's KV in blocks of `block_size` tokens, and a block is only reusable
with every block before it. So a block is named by the whole prefix it ends: a 64-bit hash of
the token ids from the start of the sequence to the block's last token, seeded by what else
makes KV differ (the model, a LoRA adapter). The sidecar names the blocks its engine stores
(from the token ids of vLLM's `BlockStored`, or the sim's own blocks) and the gateway names
the blocks of a request's prompt in the same way; the index between them compares names only.

Why the prefix, not the engine's own hashes: vLLM's block hashes depend on its hash function
and a per-process seed (`PYTHONHASHSEED`, `prefix_caching_hash_algo`), which the gateway cannot
reproduce; the events' token ids can be hashed by anyone. And because a name covers the whole
prefix, a prefix of 32 tokens has the same name whether it ends a block of 16 tokens or a block
of 32: replicas with different block sizes name their common boundaries alike, and a request is
matched against each at that replica's own block size.

The hash is CRC-32 and Adler-32 of the prefix's bytes (token ids as 4-byte little-endian
words) side by side. Both continue from their value over the bytes before, so naming the
blocks of a prompt is one pass over it, and a child block's name follows from its parent's
state and its own tokens. Stable across processes and machines; cheap in CPython.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import NamedTuple

_LITTLE = sys.byteorder == "little"


class Prefix(NamedTuple):
    """The running hash state of a token prefix; `name` is the block name it ends."""

    crc: int
    adler: int

    @property
    def name(self) -> int:
        return (self.crc << 32) | self.adler


def _bytes(token_ids: Sequence[int]) -> bytes:
    words = array("I", token_ids)  # (a negative or too large id raises OverflowError)
    if not _LITTLE:
        words.byteswap()
    return words.tobytes()


def start(model: str, adapter: str = "") -> Prefix:
    """The state before the first token: KV of another model or adapter is never shared."""
    seed = f"{model}\x00{adapter}\x00".encode()
    return Prefix(zlib.crc32(seed), zlib.adler32(seed))


def extend(state: Prefix, token_ids: Sequence[int]) -> Prefix:
    """The state after `token_ids` follow the prefix of `state`."""
    data = _bytes(token_ids)
    return Prefix(zlib.crc32(data, state.crc), zlib.adler32(data, state.adler))


def block_names(
    token_ids: Sequence[int], block_size: int, state: Prefix, max_blocks: int | None = None
) -> list[int]:
    """The names of the whole blocks of `token_ids` (a partial last block has none), at most
    `max_blocks` of them, from the state before them."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    n = len(token_ids) // block_size
    if max_blocks is not None:
        n = min(n, max_blocks)
    data = memoryview(_bytes(token_ids[: n * block_size]))
    step = 4 * block_size
    crc, adler = state
    crc32, adler32 = zlib.crc32, zlib.adler32
    names = []
    for i in range(0, n * step, step):
        chunk = data[i : i + step]
        crc = crc32(chunk, crc)
        adler = adler32(chunk, adler)
        names.append((crc << 32) | adler)
    return names
