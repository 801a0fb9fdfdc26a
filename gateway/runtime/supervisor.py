"""Places jobs on replicas and keeps them alive: retry before the first token, migrate after.

Both are the same move: submit the request again on another replica with the token ids
generated so far (empty for a retry), so the client's stream continues with no error, no
repeated and no missing token. The router (filters, weighted scorers, a picker) chooses; a
retry budget and a per-request migration limit bound the moves; failures feed passive outlier
ejection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.config.routing import HealthSettings, RetrySettings, RoutingSettings
from gateway.policy.ejection import OutlierDetector
from gateway.policy.retry import RetryPolicy
from gateway.policy.routing.router import Router
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job, State
from gateway.types import GatewayError, Unavailable, UpstreamError

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
        self.router = Router(routing or RoutingSettings(), self.outliers)
        self.retry = RetryPolicy(retry or RetrySettings(), clock())
        self.on_ejected: Callable[[str], None] | None = None
        self.migrations = 0
        self.retries = 0

    def reconfigure(
        self, routing: RoutingSettings, retry: RetrySettings, health: HealthSettings
    ) -> None:
        """A config reload: build first (ValueError names a bad field), then swap."""
        router = Router(routing, self.outliers)
        router.carry_over(self.router)
        self.outliers.settings = health.ejection
        self.retry = RetryPolicy(retry, self._clock())
        self.router = router

    # -- placement -----------------------------------------------------------------------
    def place(self, job: Job, avoid: tuple[str, ...] = ()) -> bool:
        """Submit the job (resuming after its generated tokens) on the replica the router
        picks, other than those in `avoid` (the one that just failed it)."""
        now = self._clock()
        pool = self._fleet.pool(job.request.model)
        if not pool:
            return False
        if job.features is None:
            job.features = self.router.features(job.request)
            job.attempts = self.retry.start(now)
        replica = self.router.profile.route(job.features, pool, now, avoid)
        if replica is None:
            return False
        link = self._fleet.by_name.get(replica.head)
        if link is None:
            return False
        try:
            job.key = link.submit(job.request, job, job.generated)
        except Unavailable:
            return False
        job.link = link
        job.replica = replica.name
        job.state = State.RUNNING
        if job.attempts is not None:
            job.attempts.record(replica.name)
        if not job.first_replica:
            job.first_replica = replica.address
        return True

    # -- outcomes ----------------------------------------------------------------------------
    def succeeded(self, job: Job) -> None:
        if job.replica:
            self.outliers.success(job.replica, self._clock())

    def stalled(self, replica: str) -> None:
        """The replica's engine holds work and makes no progress (the fleet saw it): eject it
        now; its requests are already migrating."""
        pools = self._fleet.assembly.pool_names.values()
        pool = frozenset().union(*(names for names in pools if replica in names))
        if self.outliers.eject(replica, self._clock(), pool) is not None:
            log.warning("replica %s ejected: its engine stalled", replica)
            if self.on_ejected is not None:
                self.on_ejected(replica)

    def recover(self, job: Job, error: GatewayError) -> bool:
        """Try to keep a failed job alive elsewhere; False when it has to end."""
        if not isinstance(error, RETRIABLE):
            return False
        now = self._clock()
        failed = (job.replica,) if job.replica else ()
        if job.replica:
            pool = self._fleet.assembly.pool_names.get(job.request.model, frozenset())
            if self.outliers.failure(job.replica, now, pool) is not None:
                log.warning("replica %s ejected after consecutive failures", job.replica)
                if self.on_ejected is not None:
                    self.on_ejected(job.replica)
        attempts = job.attempts
        if attempts is None:
            return False
        if job.generated:
            if not self.retry.may_migrate(attempts):
                return False
            job.migrations += 1
            self.migrations += 1
            moved = self.place(job, failed)
            log.warning(
                "request %s: %s after %d tokens; %s",
                job.request.request_id,
                error.message,
                len(job.generated),
                f"migrated to {job.replica}" if moved else "no replica left",
            )
            return moved
        if not self.retry.may_retry(attempts, False, now):
            return False
        job.retries += 1
        self.retries += 1
        return self.place(job, failed)

    def abort(self, job: Job) -> None:
        """Stop the job's current attempt on its engine (no delta follows)."""
        link = job.link
        if link is not None:
            link.abort(job.key)
            job.link = None
