"""Keep-alives due to queued requests: each gets one every interval while it waits, the first
one interval after it entered the queue (not at a global beat), so a request placed within
the interval never sees one."""

from __future__ import annotations

import heapq
import itertools
import math

from gateway.runtime.job import Job
from gateway.types import keepalive


class KeepAlives:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        # (when, order, job); an entry whose job was placed or gone since drops when due.
        self._heap: list[tuple[float, int, Job]] = []
        self._seq = itertools.count()

    def due(self, job: Job, when: float) -> None:
        job.beat_at = when
        heapq.heappush(self._heap, (when, next(self._seq), job))

    @property
    def next_at(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def beat(self, now: float, interval_s: float) -> None:
        """Send the keep-alives due by `now` to the jobs still queued; the next in `interval_s`."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, job = heapq.heappop(heap)
            waiter = job.waiter
            if when != job.beat_at or waiter is None or not waiter.queued:
                continue  # placed (or gone) since
            job.out.push(keepalive())
            self.due(job, now + interval_s)
