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
from gateway.runtime.job import ClientGone, Job, State
from gateway.runtime.stream import ResponseStream
from gateway.types import (
    GatewayError,
    GenerationRequest,
    ModelNotFound,
    Unavailable,
    UpstreamError,
)
from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

RETRIABLE = (Unavailable, UpstreamError)


class Supervisor:
    def __init__(
        self,
        fleet: Fleet,
        *,
        max_pending_deltas: int,
        max_retries: int = 2,
        max_migrations: int = 3,
        seed: int | None = None,
    ) -> None:
        self._fleet = fleet
        self._max_pending = max_pending_deltas
        self.max_retries = max_retries
        self.max_migrations = max_migrations
        self._rng = random.Random(seed)
        self.migrations = 0
        self.retries = 0

    def submit(self, req: GenerationRequest, tenant: str = "anonymous", priority: int = 0) -> Job:
        job = Job(req, self, ResponseStream(self._max_pending), tenant=tenant, priority=priority)
        if not self.place(job):
            if not self._fleet.knows(req.model):
                raise ModelNotFound(f"The model `{req.model}` does not exist.", "model")
            raise Unavailable(f"No healthy replica serves `{req.model}` right now.")
        return job

    # -- placement -----------------------------------------------------------------------
    def place(self, job: Job) -> bool:
        """Submit the job (resuming after its generated tokens) on a replica it has not tried."""
        links = self._fleet.candidates(job.request.model)
        if job.tried:
            links = [link for link in links if link.address not in job.tried]
        if not links:
            return False
        link = links[0] if len(links) == 1 else links[self._pick(links)]
        job.key = link.submit(job.request, job, job.generated)
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

    # -- outcomes --------------------------------------------------------------------------
    def finished(self, job: Job) -> None:
        job.state = State.DONE

    def failed(self, job: Job, error: GatewayError) -> None:
        if job.state is State.DONE:
            return
        if isinstance(error, ClientGone):
            self._abort(job)
            job.state = State.DONE
            return
        if isinstance(error, RETRIABLE) and self._recover(job, error):
            return
        job.state = State.DONE
        job.out.fail(error)

    def _recover(self, job: Job, error: GatewayError) -> bool:
        if job.generated:
            if job.migrations >= self.max_migrations:
                return False
            job.migrations += 1
            self.migrations += 1
            moved = self.place(job)
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
        return self.place(job)

    def _abort(self, job: Job) -> None:
        link = job.link
        if link is not None:
            link.abort(job.key)
            job.link = None
