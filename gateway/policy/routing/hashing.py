"""Stable 64-bit hashes (the same in every process, unlike `hash()`), for affinity."""

from __future__ import annotations

from hashlib import blake2b

MASK64 = (1 << 64) - 1


def hash64(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "little")


def str_hash64(text: str) -> int:
    return hash64(text.encode("utf-8", "surrogatepass"))


def mix64(x: int) -> int:
    """splitmix64's finalizer: a bijection on 64-bit ints that spreads every input bit."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)
