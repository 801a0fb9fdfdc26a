"""A model pool's state in the scheduler, and the refusals it gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from gateway.config.tenants import SchedulingConfig
from gateway.policy.priority_queue import SATURATED_STATUS, Overflow, PriorityQueue, Waiter
from gateway.runtime.job import Job
from gateway.types import GatewayError, RateLimited, Unavailable


class Running:
    """A pool's running jobs in the order they started (a dict: iteration is deterministic,
    unlike a set's), with how many of each class: whether any could be preempted for a
    waiter is known without a look at each."""

    __slots__ = ("_classes", "_jobs")

    def __init__(self) -> None:
        self._jobs: dict[Job, None] = {}
        self._classes: dict[int, int] = {}

    def add(self, job: Job) -> None:
        if job not in self._jobs:
            self._jobs[job] = None
            self._classes[job.priority] = self._classes.get(job.priority, 0) + 1

    def discard(self, job: Job) -> bool:
        """Whether it was running."""
        if job not in self._jobs:
            return False
        del self._jobs[job]
        n = self._classes[job.priority] - 1
        if n:
            self._classes[job.priority] = n
        else:
            del self._classes[job.priority]
        return True

    def lowest(self) -> int | None:
        """The lowest class running (None: none runs)."""
        return min(self._classes) if self._classes else None

    def __contains__(self, job: object) -> bool:
        return job in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self._jobs)


# How fast a pool's gap between finished requests follows them.
_GAP_ALPHA = 0.1


class Pool:
    __slots__ = ("_last_free", "free_gap_s", "model", "preemptions", "queue", "running")

    def __init__(self, model: str, scheduling: SchedulingConfig) -> None:
        self.model = model
        self.queue: PriorityQueue[Job] = PriorityQueue(scheduling)
        self.running = Running()
        self.preemptions: dict[int, int] = {}
        self.free_gap_s = 0.0  # the mean time between two requests finishing (a slot frees)
        self._last_free = 0.0

    def expiry_error(self, w: Waiter[Job]) -> GatewayError:
        """What a waiter that `expired` is told: too late for its target, or waited too long."""
        if w.late:
            return late_error(self.queue.config.retry_after_s)
        return overflow_error(self.queue.timed_out, "queue_timeout")

    def freed(self, now: float) -> None:
        """A running request finished: how long the next waiter may expect to wait for a
        slot follows."""
        if self._last_free:
            self.free_gap_s += _GAP_ALPHA * (now - self._last_free - self.free_gap_s)
        self._last_free = now


def overflow_error(o: Overflow, reason: str = "queue_full") -> GatewayError:
    retry = max(1, round(o.retry_after_s)) if o.retry_after_s is not None else None
    headers = (("retry-after", str(retry)),) if retry is not None else ()
    cls = RateLimited if o.status == 429 else Unavailable
    err = cls(o.reason, None, headers)
    err.reason = reason
    return err


LATE: Final = (
    "The request cannot make its time-to-first-token objective (x-slo-ttft-ms, or its "
    "tenant's or class's objectives) at the current load."
)


def late_error(retry_after_s: float) -> GatewayError:
    """A sheddable request that can no longer make its time-to-first-token target."""
    return overflow_error(Overflow(SATURATED_STATUS, LATE, retry_after_s), "objective")


def no_replica(model: str) -> GatewayError:
    err = Unavailable(f"No healthy replica serves `{model}` right now.")
    err.reason = "no_replica"
    return err
