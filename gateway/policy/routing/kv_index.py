"""Which replica of a model holds which KV blocks, as its engine says, and the gateway's guess.

The engines' KV events say which blocks each one stored and removed, and when it dropped them
all; blocks are named by the whole token prefix they end (shardgate/v1/kvblocks.py), so the
index compares names and never tokens. For a request's block names, `matched` gives each
replica the number of leading blocks it holds: a replica's run stops at its first missing block
(an engine reuses a block only with every block before it), even where it holds later ones.

Beside what the engines confirmed, the gateway's own guess: the blocks of a request it has just
sent to a replica, which that engine will store as it prefills. A guess lasts `speculative_s`
unless the engine confirms it first, so that requests right behind the first of a group are
routed to it before its events arrive, and a guess that never comes true fades.

Bounds: at most `max_blocks` confirmed names (the oldest stored goes first: losing it loses
routing information, never correctness) and `max_speculative` guesses (the oldest first).
Replicas are bits of an int mask, so a name costs one dict entry in the index and one set
entry per replica that holds it. A replica that goes away or restarts is `cleared`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence


class KvIndex:
    __slots__ = (
        "_bit",
        "_free",
        "_guess_order",
        "_guesses",
        "_held",
        "_holders",
        "_names",
        "max_blocks",
        "max_speculative",
        "speculative_s",
    )

    def __init__(
        self,
        max_blocks: int = 1_000_000,
        max_speculative: int = 100_000,
        speculative_s: float = 2.0,
    ) -> None:
        if max_blocks < 1 or max_speculative < 0 or speculative_s < 0:
            raise ValueError("max_blocks >= 1, max_speculative >= 0, speculative_s >= 0")
        self.max_blocks = max_blocks
        self.max_speculative = max_speculative
        self.speculative_s = speculative_s
        self._bit: dict[str, int] = {}  # replica -> its bit
        self._names: dict[int, str] = {}  # bit -> replica
        self._free: list[int] = []  # bits of replicas gone
        self._holders: dict[int, int] = {}  # name -> mask of replicas that hold it, oldest first
        self._held: dict[str, set[int]] = {}  # replica -> the names it holds
        self._guesses: dict[int, dict[int, float]] = {}  # name -> {bit: until}
        self._guess_order: deque[tuple[float, int, int]] = deque()  # (until, name, bit)

    # --- what the engines say -----------------------------------------------------------

    def stored(self, replica: str, names: Iterable[int]) -> None:
        bit = self._bit_of(replica)
        mask = 1 << bit
        held = self._held[replica]
        holders = self._holders
        for name in names:
            if name in held:
                continue
            held.add(name)
            holders[name] = holders.pop(name, 0) | mask  # (to the end: the newest)
            if name in self._guesses:
                self._unguess(name, bit)
        while len(holders) > self.max_blocks:
            self._drop(next(iter(holders)))

    def removed(self, replica: str, names: Iterable[int]) -> None:
        held = self._held.get(replica)
        if held is None:
            return
        keep = ~(1 << self._bit[replica])
        holders = self._holders
        for name in names:
            if name not in held:
                continue
            held.discard(name)
            mask = holders[name] & keep
            if mask:
                holders[name] = mask
            else:
                del holders[name]

    def cleared(self, replica: str) -> None:
        """The replica holds nothing (AllBlocksCleared, a restart, its link down); its guesses
        go too."""
        held = self._held.get(replica)
        if held is None:
            return
        self.removed(replica, list(held))
        bit = self._bit[replica]
        for name in [n for n, g in self._guesses.items() if bit in g]:
            self._unguess(name, bit)

    def forget(self, replica: str) -> None:
        """The replica left the fleet: cleared, and its bit free for another."""
        self.cleared(replica)
        if replica in self._bit:
            bit = self._bit.pop(replica)
            del self._names[bit], self._held[replica]
            self._free.append(bit)

    # --- the gateway's guess ------------------------------------------------------------

    def speculate(self, replica: str, names: Sequence[int], now: float) -> None:
        """`replica` was just sent a request with these blocks: count them as its own until
        `now + speculative_s`, unless its engine says first."""
        if self.max_speculative == 0 or self.speculative_s == 0:
            return
        self._expire(now)
        bit = self._bit_of(replica)
        held = self._held[replica]
        until = now + self.speculative_s
        for name in names:
            if name in held:
                continue
            self._guesses.setdefault(name, {})[bit] = until
            self._guess_order.append((until, name, bit))
        while len(self._guess_order) > self.max_speculative:
            self._end_guess(*self._guess_order.popleft())

    # --- what routing asks --------------------------------------------------------------

    def matched(self, names: Sequence[int], now: float) -> dict[str, int]:
        """Each replica's count of leading blocks of `names` held or guessed (replicas with
        none left out)."""
        self._expire(now)
        counts: dict[str, int] = {}
        alive = 0
        holders, guesses = self._holders, self._guesses
        for i, name in enumerate(names):
            mask = holders.get(name, 0)
            guessed = guesses.get(name)
            if guessed:
                for bit in guessed:
                    mask |= 1 << bit
            if i == 0:
                alive = mask
            else:
                self._count(alive & ~mask, i, counts)
                alive &= mask
            if not alive:
                return counts
        self._count(alive, len(names), counts)
        return counts

    def blocks(self, replica: str) -> int:
        """The blocks `replica`'s engine says it holds (as far as the index keeps them)."""
        held = self._held.get(replica)
        return 0 if held is None else len(held)

    def size(self) -> tuple[int, int]:
        """(block names some engine holds, block names guessed for some replica)."""
        return len(self._holders), len(self._guesses)

    # --- internals ----------------------------------------------------------------------

    def _count(self, mask: int, n: int, counts: dict[str, int]) -> None:
        while mask:
            low = mask & -mask
            counts[self._names[low.bit_length() - 1]] = n
            mask ^= low

    def _bit_of(self, replica: str) -> int:
        bit = self._bit.get(replica)
        if bit is None:
            bit = self._free.pop() if self._free else len(self._bit)
            self._bit[replica] = bit
            self._names[bit] = replica
            self._held[replica] = set()
        return bit

    def _drop(self, name: int) -> None:
        mask = self._holders.pop(name)
        while mask:
            low = mask & -mask
            self._held[self._names[low.bit_length() - 1]].discard(name)
            mask ^= low

    def _expire(self, now: float) -> None:
        order = self._guess_order
        while order and order[0][0] <= now:
            self._end_guess(*order.popleft())

    def _end_guess(self, until: float, name: int, bit: int) -> None:
        guesses = self._guesses.get(name)
        if guesses is not None and guesses.get(bit) == until:
            self._unguess(name, bit)
        # (else confirmed, cleared, or guessed again later)

    def _unguess(self, name: int, bit: int) -> None:
        guesses = self._guesses[name]
        guesses.pop(bit, None)
        if not guesses:
            del self._guesses[name]
