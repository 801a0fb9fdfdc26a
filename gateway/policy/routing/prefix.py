"""Prefix affinity's two halves: the request's block hashes, and where blocks were last sent.

`PrefixHasher` cuts the prompt (or the chat messages, serialized) into fixed-size character
blocks and hashes each block chained to the ones before it, so one hash stands for the whole
prefix up to its block; a partial last block is not hashed (engines cache whole blocks only).
The chain starts from the model and adapter, since KV caches are not shared across them. The
hashes are CRC-32 and Adler-32 of the prefix side by side: stable across processes and
machines, and cheap in CPython (a keyed cryptographic hash costs several times more per block).

`PrefixIndex` is a bounded LRU map from block hash to the replica (or the last few replicas)
that most recently got a request with that prefix. Because the hashes are chained, an owner of
block i's hash saw all blocks 0..i, whatever happened to the others.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Protocol

_MSG_START = "\x1e"  # record separator before each message
_ROLE_END = "\x1f"  # unit separator between role and content


class ChatTurn(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...


class PrefixHasher:
    __slots__ = ("block_chars", "max_blocks")

    def __init__(self, block_chars: int = 256, max_blocks: int = 64) -> None:
        if block_chars < 1 or max_blocks < 0:
            raise ValueError("block_chars must be >= 1 and max_blocks >= 0")
        self.block_chars = block_chars
        self.max_blocks = max_blocks

    def prompt(self, model: str, lora: str, text: str) -> list[int]:
        return self._hash(model, lora, text)

    def messages(self, model: str, lora: str, turns: Iterable[ChatTurn]) -> list[int]:
        limit = self.block_chars * self.max_blocks
        parts: list[str] = []
        size = 0
        for t in turns:
            if size >= limit:
                break
            content = t.content[: limit - size]  # a huge message is not copied whole
            parts += (_MSG_START, t.role, _ROLE_END, content)
            size += len(t.role) + len(content) + 2
        return self._hash(model, lora, "".join(parts))

    def _hash(self, model: str, lora: str, text: str) -> list[int]:
        b = self.block_chars
        n = min(len(text) // b, self.max_blocks)
        if n == 0:
            return []
        root = f"{model}\0{lora}\0".encode()
        crc, adler = zlib.crc32(root), zlib.adler32(root)
        head = text[: n * b]
        data = head.encode("utf-8", "surrogatepass")
        out = []
        if len(data) == len(head):  # ASCII: byte blocks are the character blocks
            view = memoryview(data)
            for i in range(0, n * b, b):
                block = view[i : i + b]
                crc, adler = zlib.crc32(block, crc), zlib.adler32(block, adler)
                out.append(crc << 32 | adler)
        else:
            for i in range(0, n * b, b):
                chunk = head[i : i + b].encode("utf-8", "surrogatepass")
                crc, adler = zlib.crc32(chunk, crc), zlib.adler32(chunk, adler)
                out.append(crc << 32 | adler)
        return out


class PrefixIndex:
    """Block hash -> the replicas that last got it (most recent first, at most `owners`), for
    at most `capacity` hashes (LRU). With several owners, a hot prefix that the load bound
    spilled onto a second replica is known to be cached on both, and load decides between
    them, instead of the prefix moving from one replica to the other and back."""

    __slots__ = ("_map", "capacity", "owners")

    def __init__(self, capacity: int, owners: int = 1) -> None:
        if capacity < 1 or owners < 1:
            raise ValueError("capacity and owners must be >= 1")
        self.capacity = capacity
        self.owners = owners
        self._map: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """Replica -> how many leading blocks of `hashes` it saw (replicas with none left out)."""
        get = self._map.get
        best: dict[str, int] = {}
        for i, h in enumerate(hashes, 1):
            owners = get(h)
            if owners is not None:
                for owner in owners:
                    best[owner] = i
        return best

    def record(self, hashes: Sequence[int], replica: str) -> None:
        m = self._map
        move = m.move_to_end
        keep = self.owners - 1
        for h in hashes:
            owners = m.get(h)
            if owners is None:
                m[h] = (replica,)
                continue
            move(h)
            if owners[0] != replica:
                m[h] = (replica, *[o for o in owners if o != replica][:keep])
        while len(m) > self.capacity:
            m.popitem(last=False)
