"""What the scheduler asks about latency targets: a waiter's due time and latest start, the
forecast of a placement, whether a running request may be paused (gateway/policy/objectives.py
has the rules, gateway/runtime/forecast.py the predictions)."""

from __future__ import annotations

import math
import time

from gateway.config.tenants import SchedulingConfig
from gateway.policy import objectives
from gateway.policy.admission import estimate_prompt_tokens
from gateway.policy.tenants import Tenant
from gateway.runtime.fleet import Fleet
from gateway.runtime.forecast import Forecasts
from gateway.runtime.job import Job
from gateway.runtime.pool import Pool
from gateway.types import Objective


def _prompt_tokens(job: Job) -> int:
    """What a placement prefills: the prompt (tokenized when routing did it, else estimated)
    and, for a resume, the tokens generated so far."""
    f = job.features
    ids = f.prompt_ids if f is not None else None
    n = len(ids) if ids else estimate_prompt_tokens(job.request)
    return n + len(job.generated)


class Targets:
    __slots__ = ("_fleet", "_scheduling", "enabled", "forecasts")

    def __init__(self, fleet: Fleet, scheduling: SchedulingConfig) -> None:
        self._fleet = fleet
        self.forecasts = Forecasts()
        self._scheduling = scheduling
        self.enabled = scheduling.objectives

    def reconfigure(self, scheduling: SchedulingConfig) -> None:
        self._scheduling = scheduling
        self.enabled = scheduling.objectives

    def resolve(self, asked: Objective | None, tenant: Tenant, priority: int) -> Objective | None:
        """A request's targets: its own, else its tenant's, else its class's."""
        klass = self._scheduling.bounds(priority).objectives
        if asked is None and tenant.objectives is None and klass is None:
            return None
        return objectives.resolve(asked, tenant.objectives, klass)

    def due(self, job: Job) -> float:
        """Its order within its tenant's line: arrival + its TTFT target (inf: none, or not
        scheduling to targets)."""
        o = job.objective
        if not self.enabled or o is None or o.ttft_s is None:
            return math.inf
        return job.arrival + o.ttft_s

    def latest_start(self, job: Job) -> float:
        """When a sheddable waiter is refused if it has not left the queue (inf: never early)."""
        o = job.objective
        if not self.enabled or o is None or o.ttft_s is None:
            return math.inf
        if job.priority >= self._scheduling.sheddable_below:
            return math.inf
        candidates = [
            (r.name, max(r.inflight, r.running))
            for r in self._fleet.pool(job.request.model)
            if r.routable
        ]
        best = self.forecasts.best_ttft(candidates, _prompt_tokens(job))
        return objectives.latest_start(job.arrival, o.ttft_s, best)

    def spares(self, job: Job, pool: Pool, now: float) -> bool:
        """Whether preempting `job` now would make it miss a target of its own (the pause: its
        predicted resume prefill, and the pool's usual wait for a slot)."""
        o = job.objective
        if not self.enabled or o is None:
            return False
        running = job.link.inflight if job.link is not None else len(pool.running)
        own = self.forecasts.uncached(job.replica, _prompt_tokens(job), None)
        resume = self.forecasts.ttft(job.replica, running, own)
        pause = (resume or 0.0) + pool.free_gap_s
        return objectives.pause_misses(
            o, now, job.arrival, job.first_token_at, len(job.generated), pause
        )

    def placed(self, job: Job, replica: str, head: str, running: int) -> None:
        """The job was submitted to `replica` with `running` requests there before it."""
        f = job.features
        cached = f.routed.get(head) if f is not None else None
        # (the token path's clock: the first token's time is read with it)
        job.forecast = self.forecasts.place(
            job, replica, running, _prompt_tokens(job), cached, time.monotonic()
        )

    def ended(self, job: Job) -> None:
        """The job is over, whichever way: nothing of it stays in the forecasts (its own
        forecast stays with it, for its report)."""
        if job.forecast is not None:
            self.forecasts.drop(job.forecast.replica, job)

    def finished(self, job: Job) -> None:
        if job.forecast is not None:
            self.forecasts.finished(job, job.forecast)
