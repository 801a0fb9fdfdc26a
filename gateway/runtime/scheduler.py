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
import time
from collections.abc import Callable, Mapping

from gateway import tasks
from gateway.config.tenants import SchedulingConfig
from gateway.policy.preemption import Preemption
from gateway.policy.priority_queue import Overflow, PriorityQueue, Waiter
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import ClientGone, Job, State
from gateway.runtime.supervisor import Supervisor
from gateway.types import GatewayError, RateLimited, Unavailable, keepalive

log = logging.getLogger(__name__)


class Pool:
    __slots__ = ("model", "preemptions", "queue", "running")

    def __init__(self, model: str, scheduling: SchedulingConfig) -> None:
        self.model = model
        self.queue: PriorityQueue[Job] = PriorityQueue(scheduling)
        self.running: set[Job] = set()
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


class Scheduler:
    """Owns every job's lifecycle between admission and its end."""

    def __init__(
        self,
        fleet: Fleet,
        supervisor: Supervisor,
        scheduling: SchedulingConfig,
        capacity_caps: Mapping[str, int],
        *,
        keepalive_s: float = 5.0,
        on_done: Callable[[Job], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        capacity_share: int = 1,
    ) -> None:
        self._fleet = fleet
        self._share = capacity_share
        self.supervisor = supervisor
        self._scheduling = scheduling
        self._caps = dict(capacity_caps)
        self._preemption = Preemption(scheduling)
        self.keepalive_s = keepalive_s
        self._on_done = on_done
        self._clock = clock
        self.pools: dict[str, Pool] = {}
        self.on_queue_wait: Callable[[Job, float], None] | None = None
        self._task: asyncio.Task[None] | None = None

    def reconfigure(self, scheduling: SchedulingConfig, capacity_caps: Mapping[str, int]) -> None:
        """A config reload: new bounds and caps for new requests; queues keep their waiters."""
        self._scheduling = scheduling
        self._caps = dict(capacity_caps)
        self._preemption = Preemption(scheduling)
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

    # -- entry -------------------------------------------------------------------------------
    def enqueue(self, job: Job, cost: float, weight: float) -> None:
        """Start the job now, or queue it; raises 429/503 when the queue refuses it."""
        now = self._clock()
        pool = self._pool(job.request.model)
        cap = self.capacity(pool.model)
        if cap == 0:
            raise no_replica(pool.model)
        job.waiter = Waiter(job.tenant, job.priority, now, cost, job, weight)
        if not pool.queue and len(pool.running) < cap:
            # Through the queue all the same, so its fairness accounting sees every request
            # and a preempted job can be requeued in its place.
            pool.queue.push(job.waiter, now)
            pool.queue.pop()
            self._start(pool, job, now)
            if job.state is State.DONE:
                raise job.out.error or Unavailable("The request could not be placed.")
            return
        result = pool.queue.push(job.waiter, now)
        if isinstance(result, Overflow):
            raise overflow_error(result)
        if result.evicted is not None:
            evicted = result.evicted.payload
            self._end(pool, evicted, overflow_error(pool.queue.evicted))
        self._dispatch(pool, now)

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
            victim = self._preemption.choose(head.priority, pool.running, now)
            if victim is None:
                return
            self._preempt(pool, victim.request, victim.resume, now)

    def _start(self, pool: Pool, job: Job, now: float) -> None:
        if not job.started_at and self.on_queue_wait is not None:
            self.on_queue_wait(job, now - job.arrival)
        job.started_at = now
        if self.supervisor.place(job):
            pool.running.add(job)
            return
        self._end(pool, job, no_replica(pool.model))

    def _preempt(self, pool: Pool, job: Job, resume: bool, now: float) -> None:
        pool.running.discard(job)
        self.supervisor.abort(job)
        job.preemptions += 1
        pool.preemptions[job.priority] = pool.preemptions.get(job.priority, 0) + 1
        if not resume:
            job.outcome = "aborted"
            self._end(pool, job, Unavailable("Shed under load: a higher class needed the slot."))
            return
        job.state = State.PREEMPTED
        assert job.waiter is not None
        pool.queue.requeue(job.waiter)
        log.info(
            "request %s (class %d) preempted after %d tokens",
            job.request.request_id,
            job.priority,
            len(job.generated),
        )

    # -- a job's outcomes (the Owner protocol) -----------------------------------------------
    def finished(self, job: Job) -> None:
        self.supervisor.succeeded(job)
        pool = self._pool(job.request.model)
        pool.running.discard(job)
        self._done(job)
        self._dispatch(pool, self._clock())

    def failed(self, job: Job, error: GatewayError) -> None:
        if job.state is State.DONE:
            return
        pool = self._pool(job.request.model)
        if isinstance(error, ClientGone):
            if job.waiter is not None and job.waiter.queued:
                pool.queue.remove(job.waiter)
            self.supervisor.abort(job)
            job.outcome = "timeout" if error.timed_out else "client_gone"
            self._end(pool, job, None)
            return
        if job.state is not State.RUNNING:
            return  # a late failure of an attempt that was already preempted
        if self.supervisor.recover(job, error):
            return
        job.outcome = "error"
        self._end(pool, job, error)

    def _end(self, pool: Pool, job: Job, error: GatewayError | None) -> None:
        was_running = job in pool.running
        pool.running.discard(job)
        job.state = State.DONE
        if error is not None:
            if error.reason and not job.outcome:
                job.outcome = f"rejected:{error.reason}"  # refused after admission
            job.out.fail(error)
        self._done(job)
        if was_running:
            self._dispatch(pool, self._clock())

    def _done(self, job: Job) -> None:
        job.state = State.DONE
        if self._on_done is not None:
            self._on_done(job)

    def capacity_changed(self) -> None:
        """Replicas came or went: start what the new capacity allows."""
        now = self._clock()
        for pool in list(self.pools.values()):
            if pool.queue:
                self._dispatch(pool, now)

    # -- the ticker: waits that expire, keep-alives, capacity that grew -------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._tick(), name="scheduler")

    async def close(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)

    async def _tick(self) -> None:
        last_keepalive = self._clock()
        while True:
            await asyncio.sleep(0.1)
            now = self._clock()
            beat = now - last_keepalive >= self.keepalive_s
            if beat:
                last_keepalive = now
            for pool in list(self.pools.values()):
                self.tick(pool, now, beat)

    def tick(self, pool: Pool, now: float, keepalive_due: bool) -> None:
        for w in pool.queue.expired(now):
            self._end(pool, w.payload, overflow_error(pool.queue.timed_out, "queue_timeout"))
        self._dispatch(pool, now)
        if keepalive_due:
            self._keepalives(pool)

    def _keepalives(self, pool: Pool) -> None:
        for w in pool.queue.waiting():
            w.payload.out.push(keepalive())
