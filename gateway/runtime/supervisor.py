"""Places jobs on replicas and keeps them alive: retry before the first token, migrate after.

Both are the same move: submit the request again on another replica with the token ids
generated so far (empty for a retry), so the client's stream continues with no error, no
repeated and no missing token.
"""

from __future__ import annotations

import logging
import random

from gateway.policy.routing import Candidate, least_loaded
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job, State
from gateway.types import GatewayError, Unavailable, UpstreamError
from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

RETRIABLE = (Unavailable, UpstreamError)


class Supervisor:
    def __init__(
        self,
        fleet: Fleet,
        *,
        max_retries: int = 2,
        max_migrations: int = 3,
        seed: int | None = None,
    ) -> None:
        self._fleet = fleet
        self.max_retries = max_retries
        self.max_migrations = max_migrations
        self._rng = random.Random(seed)
        self.migrations = 0
        self.retries = 0

    # -- placement -----------------------------------------------------------------------
    def place(self, job: Job, avoid_tried: bool = False) -> bool:
        """Submit the job (resuming after its generated tokens) on a replica; after a failure,
        one it has not tried."""
        links = self._fleet.candidates(job.request.model)
        if avoid_tried and job.tried:
            links = [link for link in links if link.address not in job.tried]
        if not links:
            return False
        link = links[0] if len(links) == 1 else links[self._pick(links)]
        try:
            job.key = link.submit(job.request, job, job.generated)
        except Unavailable:
            return False
        job.link = link
        job.state = State.RUNNING
        job.tried.append(link.address)
        if not job.first_replica:
            job.first_replica = link.address
        return True

    def _pick(self, links: list[EngineLink]) -> int:
        cands = []
        for link in links:
            load = link.load
            assert load is not None and link.info is not None
            cands.append(
                Candidate(
                    link.name,
                    link.inflight,
                    load.running,
                    load.waiting,
                    load.max_num_seqs or link.info.max_num_seqs,
                )
            )
        return least_loaded(cands, self._rng)

    def recover(self, job: Job, error: GatewayError) -> bool:
        """Try to keep a failed job alive elsewhere; False when it has to end."""
        if not isinstance(error, RETRIABLE):
            return False
        if job.generated:
            if job.migrations >= self.max_migrations:
                return False
            job.migrations += 1
            self.migrations += 1
            moved = self.place(job, avoid_tried=True)
            log.warning(
                "request %s: %s after %d tokens; %s",
                job.request.request_id,
                error.message,
                len(job.generated),
                f"migrated to {job.link.address}" if moved and job.link else "no replica left",
            )
            return moved
        if job.retries >= self.max_retries:
            return False
        job.retries += 1
        self.retries += 1
        return self.place(job, avoid_tried=True)

    def abort(self, job: Job) -> None:
        """Stop the job's current attempt on its engine (no delta follows)."""
        link = job.link
        if link is not None:
            link.abort(job.key)
            job.link = None
