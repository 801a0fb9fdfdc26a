"""Admission control per model pool: capacity, a bounded priority queue, preemption.

A pool's capacity is the sum of its routable replicas' slots (their max_num_seqs), capped by
config. Requests beyond it wait in the pool's queue (higher class first, fair between tenants);
a waiting request of a higher class may preempt a running one of a lower class: the victim is
aborted on the engine, keeps its generated tokens and goes back in the queue with its original
place, to resume later from prompt + tokens so far. Its client sees a pause, never an error.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from gateway.config.tenants import SchedulingConfig
from gateway.policy.preemption import Preemption
from gateway.policy.priority_queue import Overflow, Waiter
from gateway.runtime.deadlines import Deadlines
from gateway.runtime.events import EventQueue, Failed, Finished, Left
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.keepalives import KeepAlives
from gateway.runtime.lifecycle import ON_ENGINE, Move, next_state, stale
from gateway.runtime.pool import Pool, late_error, no_replica, overflow_error
from gateway.runtime.supervisor import Recovery, Supervisor
from gateway.runtime.targets import Targets
from gateway.types import GatewayError, Unavailable

log = logging.getLogger(__name__)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


CallLater = Callable[[float, Callable[[], None]], Cancellable]


class Tick:
    """The scheduler's timer fired: waits that expired, keep-alives that are due."""


_TICK = Tick()


class Scheduler:
    """Owns every job's life between admission and its end: the one handler of the runtime's
    events (finished, failed, client gone, timers), the only code that moves a job from one
    state to another (gateway/runtime/lifecycle.py) after admission."""

    def __init__(
        self,
        fleet: Fleet,
        supervisor: Supervisor,
        scheduling: SchedulingConfig,
        capacity_caps: Mapping[str, int],
        events: EventQueue,
        *,
        keepalive_s: float = 5.0,
        on_done: Callable[[Job], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        capacity_share: int = 1,
        call_later: CallLater | None = None,
    ) -> None:
        """`call_later(delay_s, fn)` arms the scheduler's timer (the running loop's unless
        given)."""
        self._fleet = fleet
        self._call_later = call_later
        self._share = capacity_share
        self.supervisor = supervisor
        self.events = events
        self._scheduling = scheduling
        self._caps = dict(capacity_caps)
        self._preemption = Preemption(scheduling)
        self.targets = Targets(fleet, scheduling)
        self.keepalive_s = keepalive_s
        self._on_done = on_done
        self._clock = clock
        self.pools: dict[str, Pool] = {}
        self.on_queue_wait: Callable[[Job, float], None] | None = None
        self._beats = KeepAlives()
        self.deadlines = Deadlines()  # its jobs' (job.py)
        self._timer: Cancellable | None = None
        self._timer_at = math.inf
        self._closed = False
        events.register(Finished, self._on_finished)
        events.register(Failed, self._on_failed)
        events.register(Left, self._on_left)
        events.register(Tick, self._on_tick)
        events.on_error = self._on_error

    def reconfigure(self, scheduling: SchedulingConfig, capacity_caps: Mapping[str, int]) -> None:
        """A config reload: new bounds and caps for new requests; queues keep their waiters."""
        self._scheduling = scheduling
        self._caps = dict(capacity_caps)
        self._preemption = Preemption(scheduling)
        self.targets.reconfigure(scheduling)
        for pool in self.pools.values():
            pool.queue.reconfigure(scheduling)

    # -- capacity ----------------------------------------------------------------------------
    def capacity(self, model: str) -> int:
        slots = self._fleet.capacity(model)
        if self._share > 1 and slots:
            slots = max(1, slots // self._share)  # this worker's share of the pool
        cap = self._caps.get(model)
        return slots if cap is None else min(cap, slots)

    def saturated(self, model: str) -> bool:
        """No replica to run on, or a full queue: a request had better go to a fallback."""
        if self.capacity(model) == 0:
            return True
        pool = self.pools.get(model)
        return pool is not None and len(pool.queue) >= self._scheduling.max_queued

    def _pool(self, model: str) -> Pool:
        pool = self.pools.get(model)
        if pool is None:
            pool = self.pools[model] = Pool(model, self._scheduling)
        return pool

    # -- entry (from the API edge's handler task) ----------------------------------------------
    def enqueue(self, job: Job, cost: float, weight: float) -> None:
        """Start the job now, or queue it; raises 429/503 when the queue refuses it."""
        now = self._clock()
        pool = self._pool(job.request.model)
        cap = self.capacity(pool.model)
        if cap == 0:
            raise no_replica(pool.model)
        targets = self.targets
        job.waiter = Waiter(job.tenant, job.priority, now, cost, job, weight, due=targets.due(job))
        if not pool.queue and len(pool.running) < cap:
            # Through the queue all the same, so its fairness accounting sees every request
            # and a preempted job can be requeued in its place.
            pool.queue.push(job.waiter, now)
            pool.queue.pop()
            self._start(pool, job, now)
            if stale(job.state):
                raise job.out.error or Unavailable("The request could not be placed.")
            return
        shed_at = job.waiter.shed_at = targets.latest_start(job)
        if shed_at <= now:  # (it would wait, and it cannot make its target even so)
            job.waiter = None
            raise late_error(self._scheduling.retry_after_s)
        result = pool.queue.push(job.waiter, now)
        if isinstance(result, Overflow):
            job.waiter = None  # (never queued: no cycle left for the collector)
            raise overflow_error(result)
        self._beats.due(job, now + self.keepalive_s)  # (its first keep-alive)
        if result.evicted is not None:
            evicted = result.evicted.payload
            self._end(pool, evicted, overflow_error(pool.queue.evicted))
        self._dispatch(pool, now)
        self._arm()

    # -- running the queue ---------------------------------------------------------------------
    def _dispatch(self, pool: Pool, now: float) -> None:
        queue = pool.queue
        cap = -1
        while queue:
            if cap < 0:
                cap = self.capacity(pool.model)
            head = queue.peek()
            if head is None:
                return
            if len(pool.running) < cap:
                queue.pop()
                self._start(pool, head.payload, now)
                continue
            if not self._scheduling.preemption.enabled:
                return
            lowest = pool.running.lowest()
            if lowest is None or lowest >= head.priority:
                return  # no running job of a lower class: none to preempt (none looked at)
            spares = self.targets.spares
            victim = self._preemption.choose(
                head.priority,
                (j for j in pool.running if j.preemptible and not spares(j, pool, now)),
                now,
            )
            if victim is None:
                return
            self._preempt(pool, victim.request, victim.resume, now)

    def _start(self, pool: Pool, job: Job, now: float) -> None:
        if not job.started_at and self.on_queue_wait is not None:
            self.on_queue_wait(job, now - job.arrival)
        job.started_at = now
        if not self._place(pool, job, now):
            self._end(pool, job, no_replica(pool.model))

    def _place(self, pool: Pool, job: Job, now: float, avoid: tuple[str, ...] = ()) -> bool:
        """Submit the job (resuming after its generated tokens) where the router says."""
        if job.features is None:
            job.features = self.supervisor.router.features(job.request)
            job.attempts = self.supervisor.retry.start(now)
        where = self.supervisor.choose(job, now, avoid)
        if where is None:
            return False
        running = where.link.inflight
        try:
            job.key = where.link.submit(job.request, job, job.generated)
        except Unavailable:
            return False
        job.state = next_state(job.state, Move.PLACE)
        job.link = where.link
        job.replica = where.replica
        if job.attempts is not None:
            job.attempts.record(where.replica)
        if not job.first_replica:
            job.first_replica = where.address
        job.placed()
        self.targets.placed(job, where.replica, where.link.name, running)
        pool.running.add(job)
        return True

    @staticmethod
    def _abort(job: Job) -> None:
        """Stop the job's current attempt on its engine (no delta follows)."""
        link = job.link
        if link is not None:
            link.abort(job.key)
            job.link = None

    def _preempt(self, pool: Pool, job: Job, resume: bool, now: float) -> None:
        pool.running.discard(job)
        self._abort(job)
        job.left_engine()
        job.preemptions += 1
        pool.preemptions[job.priority] = pool.preemptions.get(job.priority, 0) + 1
        if not resume:
            job.outcome = "aborted"
            self._end(pool, job, Unavailable("Shed under load: a higher class needed the slot."))
            return
        job.state = next_state(job.state, Move.PREEMPT)
        assert job.waiter is not None
        pool.queue.requeue(job.waiter)
        self._beats.due(job, now + self.keepalive_s)  # (its first keep-alive)
        rid, n = job.request.request_id, len(job.generated)
        log.info("request %s (class %d) preempted after %d tokens", rid, job.priority, n)

    # -- events ----------------------------------------------------------------------------------
    def _on_finished(self, ev: Finished) -> None:
        job = ev.job
        pool = self._pool(job.request.model)
        pool.running.discard(job)  # (first: whatever fails below, its slot is free)
        pool.freed(self._clock())
        self.targets.finished(job)  # (before _done: it reads the job's forecast)
        self._done(job)
        self.supervisor.succeeded(job)
        self._dispatch(pool, self._clock())
        self._arm()

    def _on_failed(self, ev: Failed) -> None:
        job = ev.job
        if stale(job.state) or ev.attempt != job.attempt or job.state not in ON_ENGINE:
            return  # a late failure of an attempt that was already replaced
        pool = self._pool(job.request.model)
        pool.running.discard(job)
        job.state = next_state(job.state, Move.FAIL)
        job.left_engine()
        failed = (job.replica,) if job.replica else ()
        error = ev.error
        decision = self.supervisor.recover(job, error)
        if decision is not Recovery.END:
            if decision is Recovery.MIGRATE:
                job.migrations += 1
            else:
                job.retries += 1
            moved = self._place(pool, job, self._clock(), failed)
            if decision is Recovery.MIGRATE:
                log.warning(
                    "request %s: %s after %d tokens; %s",
                    job.request.request_id,
                    error.message,
                    len(job.generated),
                    f"migrated to {job.replica}" if moved else "no replica left",
                )
            if moved:
                return
        job.outcome = "error"
        if job.pinned and job.generated:
            error = type(error)(
                f"{error.message} The stream cannot resume on another replica: "
                f"{', '.join(job.pinned)} would not apply to the tokens it already has."
            )
        self._end(pool, job, error)
        self._dispatch(pool, self._clock())
        self._arm()

    def _on_left(self, ev: Left) -> None:
        job = ev.job
        if stale(job.state):
            return
        pool = self._pool(job.request.model)
        if job.waiter is not None and job.waiter.queued:
            pool.queue.remove(job.waiter)
        self._abort(job)
        job.outcome = "timeout" if ev.timed_out else "client_gone"
        self._end(pool, job, None)
        self._arm()

    def _on_error(self, event: object, error: Exception) -> None:
        """Handling `event` raised (a bug): its request ends, the rest goes on."""
        job = getattr(event, "job", None)
        try:
            if isinstance(job, Job):
                pool = self._pool(job.request.model)
                if stale(job.state):
                    pool.running.discard(job)  # ended, whatever its handler did not finish
                else:
                    if job.waiter is not None and job.waiter.queued:
                        pool.queue.remove(job.waiter)
                    self._abort(job)
                    job.outcome = "error"
                    self._end(pool, job, GatewayError("The gateway failed to handle the request."))
        finally:
            self.capacity_changed()  # start what may wait, and time what is due

    def _end(self, pool: Pool, job: Job, error: GatewayError | None) -> None:
        was_running = pool.running.discard(job)
        job.state = next_state(job.state, Move.END)
        if error is not None:
            if error.reason and not job.outcome:
                job.outcome = f"rejected:{error.reason}"  # refused after admission
            job.out.fail(error)
        self._done(job)
        if was_running:
            self._dispatch(pool, self._clock())

    def _done(self, job: Job) -> None:
        """Once per job, whichever way it ended: its charges are settled, its line logged."""
        w, job.waiter = job.waiter, None  # (its waiter names it: freed now, not by the collector)
        self.targets.ended(job)
        if w is not None:
            self._pool(job.request.model).queue.settle(w, job.prompt_tokens + len(job.generated))
        if self._on_done is not None:
            self._on_done(job)

    def capacity_changed(self) -> None:
        """Replicas came or went: start what the new capacity allows."""
        now = self._clock()
        for pool in list(self.pools.values()):
            if pool.queue:
                self._dispatch(pool, now)
        self._arm()

    # -- the timer: the next queue deadline or keep-alive, nothing polled ------------------------
    def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = math.inf

    def next_wake(self) -> float:
        """When something is next due (the scheduler's clock), inf if nothing is."""
        when = self._beats.next_at
        for pool in self.pools.values():
            dl = pool.queue.next_deadline()
            if dl is not None and dl < when:
                when = dl
        return when

    def _arm(self) -> None:
        when = self.next_wake()
        if when >= self._timer_at or when == math.inf or self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        delay = max(0.0, when - self._clock())
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._timer = call_later(delay, self._fire)

    def _fire(self) -> None:
        self.events.post(_TICK)

    def _on_tick(self, _: Tick) -> None:
        self._timer = None
        self._timer_at = math.inf
        now = self._clock()
        try:
            for pool in list(self.pools.values()):
                for w in pool.queue.expired(now):
                    try:
                        self._end(pool, w.payload, pool.expiry_error(w))
                    except Exception:  # one request's end must not keep the others waiting
                        log.exception("ending request %s failed", w.payload.request.request_id)
            self._beats.beat(now, self.keepalive_s)
        finally:
            self._arm()
