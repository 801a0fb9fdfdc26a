"""What a finished request leaves behind: its metrics and its one log line."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.observability.labels import Outcome, RejectReason, reason_of
from gateway.observability.logging import request_log
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.objective_metrics import Result, judge

if TYPE_CHECKING:
    from gateway.runtime.job import Job


class RequestReporter:
    def __init__(self, metrics: GatewayMetrics, log_requests: bool = True) -> None:
        self.metrics = metrics
        self.log_requests = log_requests
        self._models: set[str] = set()

    def queue_wait(self, job: Job, seconds: float) -> None:
        if job.request.model not in self._models:
            self._models.add(job.request.model)
            self.metrics.add_models((job.request.model,))
        self.metrics.queue_wait(job.request.model, job.priority, seconds)

    def done(self, job: Job) -> None:
        m = self.metrics
        model = job.request.model
        if model not in self._models:
            # Only models the fleet announced get this far: the label set stays closed.
            self._models.add(model)
            m.add_models((model,))
        for _ in range(job.preemptions):
            m.preempted(model, job.priority)
        for _ in range(job.migrations):
            m.migrated(model)
        for _ in range(job.retries):
            m.retried(model)
        outcome = job.outcome or Outcome.ERROR
        now = time.monotonic()
        e2e = now - job.arrival
        ttft = job.first_token_at - job.arrival if job.first_token_at else None
        completion = len(job.generated)
        if outcome.startswith("rejected"):
            reason = reason_of(outcome.partition(":")[2]) or RejectReason.NO_REPLICA
            m.rejected(model, reason, job.priority)
            outcome = Outcome.REJECTED
        else:
            m.request_done(
                model,
                job.tenant,
                job.priority,
                Outcome(outcome),
                ttft,
                e2e,
                job.prompt_tokens,
                completion,
                job.cached_tokens,
            )
        f = job.forecast
        if f is not None:  # (its last placement's predictions against what its engine did)
            o = m.objectives
            if f.ttft_s is not None and f.observed_ttft_s is not None:
                o.predicted(model, "ttft", f.ttft_s, f.observed_ttft_s)
            if f.tpot_s is not None and f.observed_tpot_s is not None:
                o.predicted(model, "tpot", f.tpot_s, f.observed_tpot_s)
        if job.objective is not None:
            if outcome == Outcome.REJECTED:
                result = Result.REFUSED
            else:
                n = len(job.generated)
                tpot = None
                if n >= 2 and job.last_token_at > job.first_token_at:
                    tpot = (job.last_token_at - job.first_token_at) / (n - 1)
                ended = outcome in (Outcome.OK, Outcome.LENGTH)
                result = judge(job.objective, ended, ttft, tpot)
            m.objectives.request(model, job.tenant, job.priority, result)
        if self.log_requests:
            request_log(
                request_id=job.request.request_id,
                tenant=job.tenant,
                model=model,
                klass=job.priority,
                replica=job.first_replica,
                prompt_tokens=job.prompt_tokens,
                completion_tokens=completion,
                ttft_ms=None if ttft is None else ttft * 1000,
                e2e_ms=e2e * 1000,
                outcome=outcome,
                preemptions=job.preemptions,
                migrations=job.migrations,
                retries=job.retries,
            )
