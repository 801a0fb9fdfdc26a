"""A model pool's state in the scheduler, and the refusals it gives."""

from __future__ import annotations

from gateway.config.tenants import SchedulingConfig
from gateway.policy.priority_queue import Overflow, PriorityQueue
from gateway.runtime.job import Job
from gateway.types import GatewayError, RateLimited, Unavailable


class Pool:
    __slots__ = ("model", "preemptions", "queue", "running")

    def __init__(self, model: str, scheduling: SchedulingConfig) -> None:
        self.model = model
        self.queue: PriorityQueue[Job] = PriorityQueue(scheduling)
        # In the order they started (a dict: iteration is deterministic, unlike a set's).
        self.running: dict[Job, None] = {}
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
