"""What the engine's prefix cache holds, by block name, and what each link has yet to be told.

A backend that reports its cache feeds the mirror, in the engine's order, with the names of
the blocks it stored and removed (shardgate/v1/kvblocks.py), and `cleared` when it dropped
them all. Each link session holds a `KvView`: it starts with a snapshot (cleared, then every
block held) and then gathers the changes since its last message, coalesced, so that a name
stored and removed again before the message goes out costs nothing. A view whose pending
changes pass `max_pending` (and the snapshot's own size) gives them up and sends a snapshot
again: what a slow link costs is bounded by the cache's own size.

The mirror keeps its `held` set consistent whatever the backend says: a name stored twice, or
removed while not held, changes nothing. It holds at most `max_blocks` names (an engine's cache
is far smaller; a backend that lost events could otherwise grow it): past that it clears.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shardgate.v1 import engine_pb2 as pb


class KvView:
    """One link's pending changes."""

    __slots__ = ("_mirror", "_wake", "cleared", "removed", "stored")

    def __init__(self, mirror: KvMirror, wake: Callable[[], None]) -> None:
        self._mirror = mirror
        self._wake = wake
        self.cleared = True  # a snapshot first
        self.stored: set[int] = set(mirror.held)
        self.removed: set[int] = set()

    def take(self) -> pb.KvEvents | None:
        """The changes since the last call as one message, or None when there are none."""
        if not (self.cleared or self.stored or self.removed):
            return None
        msg = pb.KvEvents(cleared=self.cleared, removed=self.removed, stored=self.stored)
        self.cleared = False
        self.stored = set()
        self.removed = set()
        return msg

    def close(self) -> None:
        self._mirror.views.discard(self)

    def _resync(self) -> None:
        self.cleared = True
        self.stored = set(self._mirror.held)
        self.removed = set()


class KvMirror:
    __slots__ = (
        "block_size",
        "clears",
        "gaps",
        "held",
        "max_blocks",
        "max_pending",
        "resyncs",
        "views",
    )

    def __init__(
        self, block_size: int, max_pending: int = 200_000, max_blocks: int = 4_000_000
    ) -> None:
        if block_size < 1 or max_pending < 1 or max_blocks < 1:
            raise ValueError("block_size, max_pending and max_blocks must be at least 1")
        self.block_size = block_size
        self.max_pending = max_pending
        self.max_blocks = max_blocks
        self.held: set[int] = set()
        self.views: set[KvView] = set()
        self.resyncs = 0  # views that gave up their changes for a snapshot
        self.clears = 0  # times the whole cache was dropped (by the engine, or a gap)
        self.gaps = 0  # ... of them for a gap in the engine's events that could not be filled

    def view(self, wake: Callable[[], None]) -> KvView:
        """A new link's view (its first `take` is the snapshot); `wake` is called when it has
        something to send."""
        v = KvView(self, wake)
        self.views.add(v)
        return v

    def stored(self, names: Iterable[int]) -> None:
        held = self.held
        new = [n for n in dict.fromkeys(names) if n not in held]  # (a name once, in order)
        if not new:
            return
        held.update(new)
        for v in self.views:
            removed, stored = v.removed, v.stored
            for n in new:
                if n in removed:
                    removed.discard(n)  # (the link was told it held it: nothing to say)
                else:
                    stored.add(n)
            self._woken(v)
        if len(held) > self.max_blocks:
            self.cleared()

    def removed(self, names: Iterable[int]) -> None:
        held = self.held
        gone = [n for n in dict.fromkeys(names) if n in held]
        if not gone:
            return
        held.difference_update(gone)
        for v in self.views:
            removed, stored = v.removed, v.stored
            for n in gone:
                if n in stored:
                    stored.discard(n)  # (never told)
                else:
                    removed.add(n)
            self._woken(v)

    def cleared(self) -> None:
        """The engine holds nothing (AllBlocksCleared, a restart, a gap in its events)."""
        self.held = set()
        self.clears += 1
        for v in self.views:
            v.cleared = True
            v.stored = set()
            v.removed = set()
            v._wake()

    def apply(self, events: Iterable[tuple[int, bool]]) -> None:
        """(name, stored) pairs in the engine's order: stored when True, else removed."""
        run: list[int] = []
        kind = True
        for name, s in events:
            if s is not kind and run:
                (self.stored if kind else self.removed)(run)
                run = []
            kind = s
            run.append(name)
        if run:
            (self.stored if kind else self.removed)(run)

    def _woken(self, v: KvView) -> None:
        if len(v.stored) + len(v.removed) > max(self.max_pending, len(self.held)):
            v._resync()
            self.resyncs += 1
        v._wake()
