"""Which running request gives its slot to a waiting one of a higher class.

The victim is the running request of the lowest class strictly below the waiter's; among
those, the one (re)started last, so that the least work is thrown away. Limits: a victim that
would be resumed must have been preempted fewer than `max_per_request` times, and, if it was
preempted before, must have run `min_run_s` since its restart. With `reject_sheddable`, a
sheddable victim is rejected instead of resumed, and these limits do not apply to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gateway.config.tenants import SchedulingConfig


class Running(Protocol):
    """What the choice reads of a running request."""

    @property
    def priority(self) -> int: ...

    @property
    def started_at(self) -> float:  # its last start or restart
        ...

    @property
    def preemptions(self) -> int: ...


R = TypeVar("R", bound=Running)


@dataclass(frozen=True, slots=True)
class Victim(Generic[R]):
    request: R
    # True: abort it on the engine and requeue it; False: reject it (503), it is sheddable.
    resume: bool


class Preemption:
    __slots__ = ("enabled", "max_per_request", "min_run_s", "reject_sheddable", "sheddable_below")

    def __init__(self, config: SchedulingConfig | None = None) -> None:
        c = config if config is not None else SchedulingConfig()
        self.enabled = c.preemption.enabled
        self.max_per_request = c.preemption.max_per_request
        self.min_run_s = c.preemption.min_run_s
        self.reject_sheddable = c.preemption.reject_sheddable
        self.sheddable_below = c.sheddable_below

    def _resumes(self, r: Running) -> bool:
        return not (self.reject_sheddable and r.priority < self.sheddable_below)

    def eligible(self, r: Running, below: int, now: float) -> bool:
        """Whether `r` may be preempted for a waiter of class `below`."""
        if r.priority >= below:
            return False
        if not self._resumes(r):
            return True
        if r.preemptions >= self.max_per_request:
            return False
        return r.preemptions == 0 or now - r.started_at >= self.min_run_s

    def choose(self, waiting_priority: int, running: Iterable[R], now: float) -> Victim[R] | None:
        """The victim for a waiter of class `waiting_priority`, or None. O(len(running))."""
        if not self.enabled:
            return None
        best: R | None = None
        for r in running:
            if not self.eligible(r, waiting_priority, now):
                continue
            if (
                best is None
                or r.priority < best.priority
                or (r.priority == best.priority and r.started_at > best.started_at)
            ):
                best = r
        if best is None:
            return None
        return Victim(best, self._resumes(best))
