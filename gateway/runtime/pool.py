"""A model pool's state in the scheduler, and the refusals it gives."""

from __future__ import annotations

from collections.abc import Iterator

from gateway.config.tenants import SchedulingConfig
from gateway.policy.priority_queue import Overflow, PriorityQueue
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


class Pool:
    __slots__ = ("model", "preemptions", "queue", "running")

    def __init__(self, model: str, scheduling: SchedulingConfig) -> None:
        self.model = model
        self.queue: PriorityQueue[Job] = PriorityQueue(scheduling)
        self.running = Running()
        self.preemptions: dict[int, int] = {}


def overflow_error(o: Overflow, reason: str = "queue_full") -> GatewayError:
    retry = max(1, round(o.retry_after_s)) if o.retry_after_s is not None else None
    headers = (("retry-after", str(retry)),) if retry is not None else ()
    cls = RateLimited if o.status == 429 else Unavailable
    err = cls(o.reason, None, headers)
    err.reason = reason
    return err


def no_replica(model: str) -> GatewayError:
    err = Unavailable(f"No healthy replica serves `{model}` right now.")
    err.reason = "no_replica"
    return err
