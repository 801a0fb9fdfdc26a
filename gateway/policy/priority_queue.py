"""The bounded waiting line of one model pool: priority classes, fair between tenants.

Order: higher class first; within a class, the tenant with the least tokens served so far
(weighted: the Virtual Token Counter, gateway/policy/fair_share.py), then that tenant's waiter
due first: earliest deadline first, a waiter's due time being its arrival plus its TTFT target
(`Waiter.due`, set by the caller), or plus its class's maximum wait when it has none; then by
arrival. So two backlogged tenants are served tokens in proportion to their weights, and one
tenant's waiters leave by deadline, in arrival order among equals.

Bounds: a depth and a maximum wait per class, and a total depth per pool. When the pool is full,
a new waiter evicts the newest waiter of the lowest class strictly below its own (sheddable
classes, being the lowest, go first). A refusal is a 429 when the tenant holds at least its
weighted share of the line it overflows, else a 503. Waiters past their class's maximum wait,
or past their latest start (`Waiter.shed_at`: when they can no longer make their target), are
handed back by `expired`.

Removal is lazy (entries are marked and skipped), so push, pop, remove and evict are
O(log n) amortized.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from gateway.config.tenants import QueueBounds, SchedulingConfig
from gateway.policy.fair_share import FairClass

P = TypeVar("P")

TENANT_STATUS: Final = 429
SATURATED_STATUS: Final = 503


class Waiter(Generic[P]):
    """One waiting request. The queue sets the tag fields; `payload` is the caller's."""

    __slots__ = (
        "_epoch",
        "_owner",
        "arrival",
        "charged",
        "cost",
        "deadline",
        "due",
        "evictable",
        "payload",
        "priority",
        "seq",
        "shed_at",
        "tenant",
        "weight",
    )

    def __init__(
        self,
        tenant: str,
        priority: int,
        arrival: float,
        cost: float,
        payload: P,
        weight: float = 1.0,
        *,
        due: float = math.inf,
        shed_at: float = math.inf,
    ) -> None:
        self.tenant = tenant
        self.priority = priority
        self.arrival = arrival
        self.cost = cost
        self.payload = payload
        self.weight = weight
        self.due = due  # its order within its tenant's line (inf: arrival + the class's wait)
        self.shed_at = shed_at  # its latest start (inf: none)
        self.charged = 0.0  # what its tenant's counter was charged when it was popped
        self.seq = -1  # push order; -1: never queued
        self.deadline = math.inf  # when `expired` hands it back
        self.evictable = True
        self._epoch = 0
        self._owner: object = None

    @property
    def queued(self) -> bool:
        return self._owner is not None

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def late(self) -> bool:
        """It expired at its latest start (its target), not at its class's maximum wait."""
        return self.deadline == self.shed_at


@dataclass(frozen=True, slots=True)
class Accepted(Generic[P]):
    """Queued; `evicted` lost its place to make room and is to be rejected (`queue.evicted`)."""

    evicted: Waiter[P] | None = None


@dataclass(frozen=True, slots=True)
class Overflow:
    status: int
    reason: str
    retry_after_s: float


ACCEPTED: Final[Accepted[Any]] = Accepted()


def _refusals(retry_after_s: float) -> tuple[Overflow, Overflow]:
    """What an evicted waiter and one that waited too long are told (the settings named)."""
    evicted = "evicted by higher-priority work: the queue is full (scheduling.max_queued)"
    late = "waited too long in the queue (scheduling.default.max_wait_s, or its class's)"
    return (
        Overflow(SATURATED_STATUS, evicted, retry_after_s),
        Overflow(SATURATED_STATUS, late, retry_after_s),
    )


class _Shares:
    """Who holds how much of a line: counts and weights of the tenants in it."""

    __slots__ = ("counts", "weight_sum", "weights")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.weights: dict[str, float] = {}
        self.weight_sum = 0.0

    def add(self, w: Waiter[Any]) -> None:
        n = self.counts.get(w.tenant, 0)
        if n == 0:
            self.weights[w.tenant] = w.weight
            self.weight_sum += w.weight
        self.counts[w.tenant] = n + 1

    def discard(self, w: Waiter[Any]) -> None:
        n = self.counts[w.tenant] - 1
        if n:
            self.counts[w.tenant] = n
        else:
            del self.counts[w.tenant]
            self.weight_sum -= self.weights.pop(w.tenant)

    def over_share(self, w: Waiter[Any], total: int) -> bool:
        """Whether `w`'s tenant holds at least its weighted share of the `total` waiting."""
        n = self.counts.get(w.tenant, 0)
        if n == 0:
            return False
        return n >= total * self.weights[w.tenant] / self.weight_sum


class _Class:
    __slots__ = ("active", "bounds", "depth", "fair", "shares")

    def __init__(self, bounds: QueueBounds) -> None:
        self.bounds = bounds
        self.depth = 0
        self.active = False  # in the queue's heap of classes with waiters
        self.fair = FairClass()
        self.shares = _Shares()


class PriorityQueue(Generic[P]):
    __slots__ = (
        "_active",
        "_classes",
        "_config",
        "_deadlines",
        "_live",
        "_seq",
        "_shares",
        "_shed",
        "evicted",
        "timed_out",
    )

    def __init__(self, config: SchedulingConfig | None = None) -> None:
        self._config = config if config is not None else SchedulingConfig()
        self._classes: dict[int, _Class] = {}
        self._shares = _Shares()
        self._live = 0
        self._seq = itertools.count()
        self._active: list[int] = []  # -priority of the classes with waiters (lazy)
        # Heaps of (key..., epoch, waiter); an item is stale once its waiter left or re-entered.
        self._shed: list[tuple[int, float, int, int, Waiter[P]]] = []
        self._deadlines: list[tuple[float, int, int, Waiter[P]]] = []
        self.evicted, self.timed_out = _refusals(self._config.retry_after_s)

    def __len__(self) -> int:
        return self._live

    @property
    def config(self) -> SchedulingConfig:
        return self._config

    def reconfigure(self, config: SchedulingConfig) -> None:
        """New bounds for new waiters (a config reload); waiters already queued stay."""
        self._config = config
        for priority, c in self._classes.items():
            c.bounds = config.bounds(priority)
        self.evicted, self.timed_out = _refusals(config.retry_after_s)

    def depth(self, priority: int) -> int:
        c = self._classes.get(priority)
        return 0 if c is None else c.depth

    def _class(self, priority: int) -> _Class:
        c = self._classes.get(priority)
        if c is None:
            c = self._classes[priority] = _Class(self._config.bounds(priority))
        return c

    # -- entering -------------------------------------------------------------------------

    def push(self, w: Waiter[P], now: float) -> Accepted[P] | Overflow:
        """Queue a new waiter; or refuse it (nothing changes). `now` starts its wait."""
        if w._owner is not None or w.seq >= 0:
            raise ValueError("waiter was queued before: requeue() it")
        c = self._class(w.priority)
        if c.depth >= c.bounds.max_depth:
            where = f"classes.{w.priority}" if w.priority in self._config.classes else "default"
            why = f"priority class queue is full (scheduling.{where}.max_depth)"
            return self._overflow(w, c.shares, c.depth, why)
        evicted = None
        if self._live >= self._config.max_queued:
            evicted = self.evict(w.priority)
            if evicted is None:
                why = "queue is full (scheduling.max_queued)"
                return self._overflow(w, self._shares, self._live, why)
        w.seq = next(self._seq)
        w.deadline = now + c.bounds.max_wait_s
        if w.shed_at < w.deadline:
            w.deadline = w.shed_at
        if w.due == math.inf:
            w.due = w.arrival + c.bounds.max_wait_s
        w.evictable = True
        self._enter(w, c)
        return ACCEPTED if evicted is None else Accepted(evicted)

    def requeue(self, w: Waiter[P]) -> None:
        """Put back a waiter that was popped (a preempted request): it keeps its arrival and
        finish tag, so it goes ahead of what arrived after it; it is never refused, evicted or
        expired (the runtime's request deadline bounds it)."""
        if w._owner is not None or w.seq < 0:
            raise ValueError("only a popped waiter can be requeued")
        w.deadline = math.inf
        w.evictable = False
        c = self._class(w.priority)
        c.fair.refund(w)
        self._enter(w, c)

    def _enter(self, w: Waiter[P], c: _Class) -> None:
        w._epoch += 1
        w._owner = self
        e = w._epoch
        c.fair.enter(w)
        if not c.active:
            c.active = True
            heapq.heappush(self._active, -w.priority)
        if w.evictable:
            heapq.heappush(self._shed, (w.priority, -w.arrival, -w.seq, e, w))
        if w.deadline != math.inf:
            heapq.heappush(self._deadlines, (w.deadline, w.seq, e, w))
        c.depth += 1
        c.shares.add(w)
        self._shares.add(w)
        self._live += 1

    def _overflow(self, w: Waiter[P], shares: _Shares, total: int, why: str) -> Overflow:
        retry = self._config.retry_after_s
        if shares.over_share(w, total):
            return Overflow(TENANT_STATUS, f"{why}: tenant is over its share", retry)
        return Overflow(SATURATED_STATUS, why, retry)

    # -- leaving --------------------------------------------------------------------------

    def _leave(self, w: Waiter[P]) -> None:
        w._owner = None
        c = self._classes[w.priority]
        c.depth -= 1
        c.fair.leave(w)
        c.shares.discard(w)
        self._shares.discard(w)
        self._live -= 1
        if len(self._shed) + len(self._deadlines) > 4 * self._live + 128:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap items (amortized: runs when most items are stale)."""
        self._shed = [i for i in self._shed if i[-1]._owner is self and i[-2] == i[-1]._epoch]
        self._deadlines = [
            i for i in self._deadlines if i[-1]._owner is self and i[-2] == i[-1]._epoch
        ]
        heapq.heapify(self._shed)
        heapq.heapify(self._deadlines)

    def peek(self) -> Waiter[P] | None:
        """The waiter `pop` would return."""
        active = self._active
        while active:
            c = self._classes[-active[0]]
            if c.depth:
                w: Waiter[P] | None = c.fair.peek()
                return w
            c.active = False
            heapq.heappop(active)
        return None

    def pop(self) -> Waiter[P] | None:
        """Take the next waiter to run: highest class, then the tenant served least, then the
        waiter due first."""
        w = self.peek()
        if w is None:
            return None
        self._classes[w.priority].fair.charge(w)
        self._leave(w)
        return w

    def remove(self, w: Waiter[P]) -> bool:
        """Take `w` out (its client left); False if it is not in this queue."""
        if w._owner is not self:
            return False
        self._leave(w)
        return True

    def evict(self, below: int) -> Waiter[P] | None:
        """Take out the newest waiter of the lowest class strictly below `below` (requeued
        waiters excepted); None if there is none."""
        shed = self._shed
        while shed:
            item = shed[0]
            w = item[-1]
            if w._owner is self and item[-2] == w._epoch:
                if w.priority >= below:
                    return None
                heapq.heappop(shed)
                self._leave(w)
                return w
            heapq.heappop(shed)
        return None

    def expired(self, now: float) -> Sequence[Waiter[P]]:
        """Take out and return the waiters whose class's maximum wait has passed."""
        out: list[Waiter[P]] | None = None
        while self._deadlines and self._deadlines[0][0] <= now:
            # _leave may compact the heaps: read self._deadlines afresh each time.
            _, _, epoch, w = heapq.heappop(self._deadlines)
            if w._owner is self and epoch == w._epoch:
                self._leave(w)
                if out is None:
                    out = []
                out.append(w)
        return out if out is not None else ()

    def next_deadline(self) -> float | None:
        """When `expired` will next have something to return."""
        dl = self._deadlines
        while dl:
            _, _, epoch, w = dl[0]
            if w._owner is self and epoch == w._epoch:
                return dl[0][0]
            heapq.heappop(dl)
        return None

    def waiting(self) -> list[Waiter[P]]:
        """Every waiter in the queue, in no particular order (O(n): for periodic work)."""
        return [
            i[-1]
            for c in self._classes.values()
            for f in c.fair.flows.values()
            for i in f.heap
            if i[-1]._owner is self and i[-2] == i[-1]._epoch
        ]

    # -- accounting -----------------------------------------------------------------------

    def settle(self, w: Waiter[P], used_tokens: float) -> None:
        """A request ended: its tenant's counter holds what it really used (prompt and
        generated tokens) instead of the cost it was charged when it left the queue. A waiter
        that never left (refused, expired, gone while queued) was never charged: nothing to
        correct. A tenant whose requests use less than they reserve moves forward."""
        c = self._classes.get(w.priority)
        if c is None or not w.charged:
            return
        used = used_tokens / w.weight
        c.fair.settle(w.tenant, used - w.charged)
        w.charged = used
