"""The front door of the runtime: tenant, priority class, rate limits, then the scheduler."""

from __future__ import annotations

import time
from collections.abc import Callable

from shardgate.v1.params import asked, template_asked

from gateway.config.pricing import Pricing
from gateway.observability.labels import Outcome, RejectReason, reason_of
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.objective_metrics import Result
from gateway.policy import grants
from gateway.policy.admission import Rejected, estimate_prompt_tokens
from gateway.policy.tenants import Tenants
from gateway.runtime.admitter import Admitter
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.keyring import Keyring
from gateway.runtime.scheduler import Scheduler
from gateway.runtime.stream import ResponseStream
from gateway.types import (
    GatewayError,
    GenerationRequest,
    InvalidRequest,
    ModelNotFound,
    RateLimited,
    Unavailable,
)


def reject_reason(r: Rejected) -> RejectReason:
    return RejectReason.RATE_TOKENS if r.tokens else RejectReason.RATE_REQUESTS


def reason_of_error(e: GatewayError) -> RejectReason:
    return reason_of(e.reason) or RejectReason.NO_REPLICA


def rejection_error(r: Rejected) -> GatewayError:
    cls = RateLimited if r.status == 429 else Unavailable
    return cls(f"Rate limit reached: {r.reason}.", None, r.headers)


class Service:
    def __init__(
        self,
        fleet: Fleet,
        scheduler: Scheduler,
        tenants: Tenants,
        admission: Admitter,
        max_pending_deltas: int,
        metrics: GatewayMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.fallbacks: dict[str, str] = {}
        self.fleet = fleet
        self.scheduler = scheduler
        self.tenants = tenants
        self.admission = admission
        self.max_pending = max_pending_deltas
        self._clock = clock
        self.keyring: Keyring | None = None  # the store's keys, budgets and ledger
        self.pricing = Pricing()  # what a request's worst case and real cost are priced at

    async def submit(self, req: GenerationRequest, api_key: str | None) -> Job:
        """Admit and schedule a request; raises 401/404/429/503 errors with their headers."""
        tenant, grant = self.tenants.resolve_grant(api_key)
        if not self.fleet.knows(req.model) and req.model not in self.fallbacks:
            raise ModelNotFound(f"The model `{req.model}` does not exist.", "model")
        # A LoRA adapter named as the model (vLLM's convention) runs in its parent's pool, on
        # the replicas that hold the adapter (the router's `serves` filter).
        req.model, req.lora = self.fleet.adapter_of(req.model)
        req.model = self.degrade(req.model)
        self._check_capabilities(req)
        priority = tenant.priority(req.model, req.priority)
        req.priority = priority
        req.objective = self.scheduler.targets.resolve(req.objective, tenant, priority)
        prompt = estimate_prompt_tokens(req)
        estimate = prompt + req.sampling.max_tokens
        now = self._clock()
        charge = None
        if grant is not None:
            worst = self.pricing.cost_usd(req.model, prompt, req.sampling.max_tokens)
            try:
                charge = grants.admit(grant, req.model, estimate, worst, time.time(), now)
            except RateLimited as e:  # its budget, or its per-minute limits
                if self.metrics is not None:
                    self.metrics.rejected(req.model, reason_of_error(e), priority)
                raise
        try:
            ticket = await self.admission.reserve(tenant, req.model, estimate, now)
        except BaseException:  # (a shared store's error, or the caller's cancellation)
            if charge is not None:
                grants.settle(charge, 0, 0.0, time.time(), now)
            raise
        if isinstance(ticket, Rejected):
            if charge is not None:
                grants.settle(charge, 0, 0.0, time.time(), now)
            if self.metrics is not None:
                self.metrics.rejected(req.model, reject_reason(ticket), priority)
            raise rejection_error(ticket)
        job = Job(
            req,
            self.scheduler.events,
            ResponseStream(self.max_pending),
            tenant=tenant.name,
            priority=priority,
            arrival=now,
            deadlines=self.scheduler.deadlines,
        )
        job.ticket = ticket
        job.charge = charge
        if self.metrics is not None:
            job.observe_itl = self.metrics.itl_observer(req.model)
        try:
            self.scheduler.enqueue(job, estimate, tenant.weight)
        except GatewayError as e:
            self.admission.complete(ticket, 0, now)
            if charge is not None:
                grants.settle(charge, 0, 0.0, time.time(), now)
            if self.metrics is not None and not job.outcome:
                self.metrics.rejected(req.model, reason_of_error(e), priority)
                if job.objective is not None:
                    self.metrics.objectives.request(
                        req.model, tenant.name, priority, Result.REFUSED
                    )
            e.headers = (*ticket.headers, *e.headers)
            raise
        return job

    def _check_capabilities(self, req: GenerationRequest) -> None:
        """A field the model's engines cannot honour is refused by name, never ignored."""
        wanted = asked(req.sampling)
        if req.generation.tools is not None:
            wanted.append("tools")
        wanted.extend(template_asked(req.generation))
        if not wanted:
            return
        honoured = self.fleet.capabilities.get(req.model, frozenset())
        for name in wanted:
            if name not in honoured:
                structured = req.sampling.structured
                if name == "structured" and structured is not None:
                    name = structured.field  # the field the client used for it
                raise InvalidRequest(
                    f"model {req.model}: {name} is not supported by its engine.", name
                )

    def degrade(self, model: str) -> str:
        """The model to serve: `model`, or down its fallback chain while it is saturated."""
        seen = {model}
        while self.scheduler.saturated(model):
            fallback = self.fallbacks.get(model)
            if fallback is None or fallback in seen:
                break
            seen.add(fallback)
            model = fallback
        return model

    def settle(self, job: Job) -> None:
        """A job ended: reconcile its rate-limit charge with what it really used; its cost
        counted on its budgets and written to the ledger."""
        ticket = job.ticket
        if ticket is None:
            return
        used = job.prompt_tokens + len(job.generated)
        self.admission.complete(ticket, used, self._clock())
        if self.keyring is not None:
            tokens = (job.prompt_tokens, len(job.generated), job.cached_tokens)
            status = job.outcome or Outcome.ERROR
            req = job.request
            wall = time.time() - (self._clock() - job.arrival)
            self.keyring.record(
                job.charge,
                req.request_id,
                job.tenant,
                req.model,
                tokens,
                status,
                self.pricing,
                wall,
            )
