"""The sim engine's waiting queue: higher priority first, then arrival order."""

from __future__ import annotations

import heapq

from engine_sidecar.backends.sim.sequence import WAITING, SimSeq


class WaitingQueue:
    """A heap of (-priority, arrival, seq). A sequence that leaves the WAITING state while
    queued (aborted) is skipped lazily, and dropped in bulk once most entries are stale.

    A preempted sequence is pushed back with its original arrival, so it goes ahead of every
    later arrival of its priority: the front of the queue, as in vLLM.
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, SimSeq]] = []
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def push(self, seq: SimSeq) -> None:
        seq.state = WAITING
        heapq.heappush(self._heap, (-seq.priority, seq.arrival, seq))
        self._live += 1

    def peek(self) -> SimSeq:
        heap = self._heap
        while heap[0][2].state != WAITING:
            heapq.heappop(heap)
        return heap[0][2]

    def pop(self) -> SimSeq:
        seq = self.peek()
        heapq.heappop(self._heap)
        self._live -= 1
        return seq

    def discarded(self) -> None:
        """A queued sequence left the WAITING state (its entry is now stale)."""
        self._live -= 1
        if len(self._heap) > 2 * self._live + 64:
            self._heap = [e for e in self._heap if e[2].state == WAITING]
            heapq.heapify(self._heap)
