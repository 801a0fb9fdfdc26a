"""What every engine's prefix cache holds, as the sidecars report it on their links.

A sidecar that reports its cache announces its block size (InfoReply.kv_block_size) and then
sends `KvEvents` with its steps: cleared, removed, stored (engine.proto). They go into one
`KvIndex` keyed by sidecar name (block names are seeded by model and adapter, so one index
serves every model without collisions). A link that goes down clears its sidecar: a restarted
engine starts empty, and a link that comes back starts with a snapshot.

Pure: the links call it from their readers, routing reads it. Counters for /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gateway.policy.routing.kv_index import KvIndex


class KvMessage(Protocol):
    """engine.proto `KvEvents` as routing reads it."""

    @property
    def cleared(self) -> bool: ...
    @property
    def removed(self) -> Iterable[int]: ...
    @property
    def stored(self) -> Iterable[int]: ...


class EngineCaches:
    __slots__ = (
        "best_tokens",
        "block_sizes",
        "chosen_tokens",
        "events",
        "index",
        "matched_requests",
        "snapshots",
        "unexpected",
    )

    def __init__(self, index: KvIndex | None = None) -> None:
        self.index = index or KvIndex()
        self.block_sizes: dict[str, int] = {}  # sidecar -> its engine's block size (reporting)
        self.events = 0  # block names stored or removed, applied
        self.snapshots = 0  # messages that cleared a sidecar first (a link's first, a resync)
        self.unexpected = 0  # messages from a sidecar that announced no block size
        # Requests routed on the engines' reports, and their prompt tokens cached on the replica
        # chosen against the most any candidate held (summed): what load balance cost in hits.
        self.matched_requests = 0
        self.chosen_tokens = 0
        self.best_tokens = 0

    def routed(self, chosen_tokens: int, best_tokens: int) -> None:
        self.matched_requests += 1
        self.chosen_tokens += chosen_tokens
        self.best_tokens += best_tokens

    def announced(self, sidecar: str, block_size: int) -> None:
        """A sidecar announced itself: it reports its cache in blocks of `block_size` tokens
        (0: it does not)."""
        if block_size > 0:
            if self.block_sizes.get(sidecar, block_size) != block_size:
                self.index.cleared(sidecar)  # (another engine behind it now)
            self.block_sizes[sidecar] = block_size
        else:
            self.block_sizes.pop(sidecar, None)
            self.index.cleared(sidecar)

    def apply(self, sidecar: str, msg: KvMessage) -> None:
        if sidecar not in self.block_sizes:
            self.unexpected += 1
            return
        index = self.index
        if msg.cleared:
            index.cleared(sidecar)
            self.snapshots += 1
        removed, stored = list(msg.removed), list(msg.stored)
        if removed:
            index.removed(sidecar, removed)
        if stored:
            index.stored(sidecar, stored)
        self.events += len(removed) + len(stored)

    def lost(self, sidecar: str) -> None:
        """Its link went down: what its engine holds is unknown until the next snapshot."""
        self.index.cleared(sidecar)

    def forget(self, sidecar: str) -> None:
        """It left the fleet."""
        self.block_sizes.pop(sidecar, None)
        self.index.forget(sidecar)

    def block_size(self, sidecar: str) -> int:
        """The block size of a sidecar that reports its cache, else 0."""
        return self.block_sizes.get(sidecar, 0)
