"""Decides where jobs go and what happens to a failed one: retry before the first token,
migrate after, or end. It returns decisions; the scheduler carries them out.

Retry and migration are the same move: submit the request again on another replica with the
token ids generated so far (empty for a retry), so the client's stream continues with no error,
no repeated and no missing token. The router (filters, weighted scorers, a picker) chooses; a
retry budget and a per-request migration limit bound the moves; failures feed passive outlier
ejection.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.config.routing import HealthSettings, RetrySettings, RoutingSettings
from gateway.policy.ejection import OutlierDetector
from gateway.policy.retry import RetryPolicy
from gateway.policy.routing.router import Router
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.types import GatewayError, Unavailable, UpstreamError

if TYPE_CHECKING:
    from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

RETRIABLE = (Unavailable, UpstreamError)


class Supervisor:
    def __init__(
        self,
        fleet: Fleet,
        routing: RoutingSettings | None = None,
        retry: RetrySettings | None = None,
        health: HealthSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fleet = fleet
        self._clock = clock
        health = health or HealthSettings()
        self.outliers = OutlierDetector(health.ejection)
        routing = routing or RoutingSettings()
        self._configure_kv(routing)
        self.router = self._router(routing)
        self.retry = RetryPolicy(retry or RetrySettings(), clock())
        self.on_ejected: Callable[[str], None] | None = None
        self.migrations = 0
        self.retries = 0

    def reconfigure(
        self, routing: RoutingSettings, retry: RetrySettings, health: HealthSettings
    ) -> None:
        """A config reload: build first (ValueError names a bad field), then swap."""
        router = self._router(routing)
        self._configure_kv(routing)
        router.carry_over(self.router)
        self.outliers.settings = health.ejection
        self.retry = RetryPolicy(retry, self._clock())
        self.router = router

    def _router(self, routing: RoutingSettings) -> Router:
        kv = self._fleet.kv
        return Router(routing, self.outliers, caches=kv.caches, tokens=kv.tokens)

    def _configure_kv(self, routing: RoutingSettings) -> None:
        kv, feed = routing.kv, self._fleet.kv
        index = feed.caches.index
        index.max_blocks = kv.max_blocks
        index.max_speculative = kv.max_speculative
        index.speculative_s = kv.speculative_s
        feed.tokens.max_chars = kv.max_prompt_chars
        feed.tokens.overrides = dict(kv.tokenizers)

    # -- placement -----------------------------------------------------------------------
    def choose(self, job: Job, now: float, avoid: tuple[str, ...] = ()) -> Placement | None:
        """Where the router would place the job now, other than on the replicas in `avoid`
        (the one that just failed it); None when nowhere."""
        assert job.features is not None
        pool = self._fleet.pool(job.request.model)
        if not pool:
            return None
        replica = self.router.profile.route(job.features, pool, now, avoid)
        if replica is None:
            return None
        link = self._fleet.by_name.get(replica.head)
        if link is None:
            return None
        return Placement(link, replica.name, replica.address)

    # -- outcomes ----------------------------------------------------------------------------
    def succeeded(self, job: Job) -> None:
        if job.replica:
            self.outliers.success(job.replica, self._clock())

    def stalled(self, replica: str) -> bool:
        """The replica's engine holds work and makes no progress (the fleet saw it): eject it
        now if the cap of every pool it serves allows (True: ejected now, its requests are to
        migrate). One the cap keeps stays routable; the fleet offers it again while it stalls."""
        now = self._clock()
        if self.outliers.is_ejected(replica, now):
            return False
        r = self._fleet.assembly.by_name.get(replica)
        pools = [self._fleet.live(model) for model in (r.models if r is not None else ())]
        pool, *more = pools or [frozenset({replica})]  # (in no pool: alone, never ejected)
        if self.outliers.eject(replica, now, pool, *more) is None:
            return False
        log.warning("replica %s ejected: its engine stalled", replica)
        if self.on_ejected is not None:
            self.on_ejected(replica)
        return True

    def recover(self, job: Job, error: GatewayError) -> Recovery:
        """What to do with a job whose attempt failed: move it (a retry before its first
        token, a migration after), or end it. Counts the failure against its replica."""
        if not isinstance(error, RETRIABLE):
            return Recovery.END
        now = self._clock()
        if job.replica:
            pool = self._fleet.live(job.request.model)
            if self.outliers.failure(job.replica, now, pool) is not None:
                log.warning("replica %s ejected after consecutive failures", job.replica)
                if self.on_ejected is not None:
                    self.on_ejected(job.replica)
        attempts = job.attempts
        if attempts is None:
            return Recovery.END
        if job.generated:
            if job.pinned or not self.retry.may_migrate(attempts):
                return Recovery.END
            self.migrations += 1
            return Recovery.MIGRATE
        if not self.retry.may_retry(attempts, False, now):
            return Recovery.END
        self.retries += 1
        return Recovery.RETRY


class Recovery(enum.Enum):
    MIGRATE = "migrate"  # resume on another replica after the tokens so far
    RETRY = "retry"  # start again on another replica (no token yet)
    END = "end"


@dataclass(frozen=True, slots=True)
class Placement:
    link: EngineLink
    replica: str  # its name (a shard group's)
    address: str  # its head's
