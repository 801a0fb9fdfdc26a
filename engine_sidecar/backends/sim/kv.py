"""The KV cache of the sim engine: a fixed pool of blocks and a prefix cache. Pure, no I/O.

Only the accounting is modelled, not block contents. A sequence holds private blocks (the
partial tail of its prompt, its generated tokens) and shared blocks: full prompt blocks known to
the prefix cache by the name of the prefix they end (shardgate/v1/kvblocks.py, seeded by the
model and the LoRA adapter: the names the gateway's KV index uses). Cached blocks are
ref-counted; at refcount 0 a block stays cached but idle, and idle blocks are evicted LRU-first
only when their space is needed. Invariant: used (private + cached in use) + idle <= num_blocks.

With `events`, the cache records what vLLM's KV events say: the blocks it stored (new in the
prefix cache) and removed (evicted), in their order, until `take_events`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from shardgate.v1.kvblocks import Prefix, block_names, start


class _SeqBlocks:
    __slots__ = ("capacity", "private", "shared")

    def __init__(self, shared: list[int], private: int, capacity: int) -> None:
        self.shared = shared  # hashes of the cached blocks it holds, in prompt order
        self.private = private
        self.capacity = capacity  # tokens its blocks can hold


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = True,
        model: str = "",
        events: bool = False,
    ) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be > 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.model = model
        self._starts: dict[bytes, Prefix] = {}
        self._events: list[tuple[int, bool]] | None = [] if events else None
        self._seqs: dict[int, _SeqBlocks] = {}
        self._refs: dict[int, int] = {}  # every cached block: hash -> refcount
        self._idle: OrderedDict[int, None] = OrderedDict()  # cached at refcount 0, LRU first
        self._used = 0  # blocks with refcount > 0: private ones + cached ones in use
        self.queried_tokens = 0  # prefix cache lookups, in prompt tokens
        self.hit_tokens = 0
        self.evictions = 0

    # --- numbers -------------------------------------------------------------------------
    @property
    def num_used(self) -> int:
        return self._used

    @property
    def num_cached_idle(self) -> int:
        return len(self._idle)

    @property
    def num_free(self) -> int:
        """Blocks neither in use nor cached."""
        return self.num_blocks - self._used - len(self._idle)

    @property
    def num_available(self) -> int:
        """Blocks an allocation may take: free ones plus evictable idle cached ones."""
        return self.num_blocks - self._used

    def usage(self) -> float:
        return self._used / self.num_blocks

    def prefix_hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    def __contains__(self, seq_key: int) -> bool:
        return seq_key in self._seqs

    # --- hashing -------------------------------------------------------------------------
    def block_hashes(self, token_ids: Sequence[int], salt: bytes = b"") -> list[int]:
        """The names of the full blocks of `token_ids`; `salt` (a LoRA adapter's name)
        separates their caches."""
        first = self._starts.get(salt)
        if first is None:
            first = self._starts[salt] = start(self.model, salt.decode("utf-8", "replace"))
        return block_names(token_ids, self.block_size, first)

    @property
    def records_events(self) -> bool:
        return self._events is not None

    def take_events(self) -> list[tuple[int, bool]]:
        """(name, True: stored / False: removed) since the last call, in order; empty without
        `events`."""
        out = self._events
        if not out:
            return []
        self._events = []
        return out

    def _found(self, hashes: Sequence[int]) -> int:
        refs = self._refs
        found = 0
        for h in hashes:
            if h not in refs:
                break
            found += 1
        return found

    def cached_tokens(self, num_tokens: int, hashes: Sequence[int]) -> int:
        """Prompt tokens a prompt of `num_tokens` would find cached; changes nothing.

        Like vLLM, the last prompt token is always computed (its logits are needed), so a prompt
        that is entirely cached still computes its last block.
        """
        if not self.enable_caching or num_tokens <= 0:
            return 0
        return min(self._found(hashes), (num_tokens - 1) // self.block_size) * self.block_size

    # --- allocation ----------------------------------------------------------------------
    def allocate_prompt(
        self,
        seq_key: int,
        token_ids: Sequence[int],
        *,
        lookahead: int = 0,
        hashes: Sequence[int] | None = None,
    ) -> int | None:
        """Blocks for `token_ids` plus `lookahead` more tokens.

        Returns the number of prompt tokens found in the prefix cache, or None (and changes
        nothing) when there is no room.
        """
        if seq_key in self._seqs:
            raise ValueError(f"sequence {seq_key} already has blocks")
        bs = self.block_size
        n = len(token_ids)
        total = -(-(n + lookahead) // bs)
        refs = self._refs
        if self.enable_caching:
            if hashes is None:
                hashes = self.block_hashes(token_ids)
            found = self._found(hashes)
            reused_idle = sum(1 for h in hashes[:found] if refs[h] == 0)
        else:
            hashes, found, reused_idle = (), 0, 0
        new_blocks = total - found
        if new_blocks > self.num_blocks - self._used - reused_idle:
            return None

        idle = self._idle
        shared: list[int] = []
        for h in hashes[:found]:
            r = refs[h]
            if r == 0:
                del idle[h]
                self._used += 1
            refs[h] = r + 1
            shared.append(h)
        self._evict(new_blocks - self.num_free)
        private = total - len(hashes)
        for h in hashes[found:]:
            if h in refs:  # an orphan whose parent was evicted: do not share it
                private += 1
            else:
                refs[h] = 1
                shared.append(h)
                if self._events is not None:
                    self._events.append((h, True))
        self._used += new_blocks
        self._seqs[seq_key] = _SeqBlocks(shared, private, total * bs)
        hit = min(found, (n - 1) // bs) * bs if n > 0 else 0
        self.queried_tokens += n
        self.hit_tokens += hit
        return hit

    def capacity(self, seq_key: int) -> int:
        """Tokens the sequence's blocks can hold."""
        return self._seqs[seq_key].capacity

    def append_slot(self, seq_key: int, new_len: int) -> bool:
        """Make the sequence's blocks hold `new_len` tokens; False (nothing changes) if no room."""
        s = self._seqs[seq_key]
        if new_len <= s.capacity:
            return True
        bs = self.block_size
        need = -(-new_len // bs) - s.capacity // bs
        if need > self.num_blocks - self._used:
            return False
        self._evict(need - self.num_free)
        s.private += need
        s.capacity += need * bs
        self._used += need
        return True

    def free(self, seq_key: int) -> None:
        """Release a sequence's blocks; its cached blocks stay cached (idle) at refcount 0."""
        s = self._seqs.pop(seq_key, None)
        if s is None:
            return
        refs, idle = self._refs, self._idle
        # Tail blocks first, so that they become least recently used and are evicted first.
        for h in reversed(s.shared):
            r = refs[h] - 1
            refs[h] = r
            if r == 0:
                idle[h] = None
                self._used -= 1
        self._used -= s.private

    def _evict(self, count: int) -> None:
        idle, refs = self._idle, self._refs
        for _ in range(count):
            h, _none = idle.popitem(last=False)
            del refs[h]
            self.evictions += 1
            if self._events is not None:
                self._events.append((h, False))

    # --- checks --------------------------------------------------------------------------
    def check(self) -> None:
        """Assert the accounting invariants (for tests)."""
        in_use = sum(1 for r in self._refs.values() if r > 0)
        private = sum(s.private for s in self._seqs.values())
        assert self._used == in_use + private, (self._used, in_use, private)
        assert len(self._idle) == sum(1 for r in self._refs.values() if r == 0)
        assert all(self._refs[h] == 0 for h in self._idle)
        assert self._used + len(self._idle) <= self.num_blocks
        held: dict[int, int] = {}
        for s in self._seqs.values():
            for h in s.shared:
                held[h] = held.get(h, 0) + 1
        assert all(self._refs.get(h) == c for h, c in held.items()), "refcount mismatch"
