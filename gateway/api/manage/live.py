"""GET /admin/replicas and GET /admin/requests: what LiteLLM has no endpoint for. The fleet's
replicas with their state and load, and the requests running or queued here (this instance,
this worker), for the admin page and for scripts."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.scheduler import Scheduler

MAX_LISTED: Final = 1000  # requests listed at most (the counts are of all)


def replicas(fleet: Fleet) -> list[dict[str, Any]]:
    return [
        {
            "model": model,
            "name": r.name,
            "address": r.address,
            "health": r.health.name.lower(),
            "ready": r.ready,
            "whole": r.whole,
            "max_num_seqs": r.max_num_seqs,
            "running": r.running,
            "waiting": r.waiting,
            "kv_usage": r.kv_usage,
            "inflight": r.inflight,
        }
        for model in sorted(fleet.models())
        for r in fleet.pool(model)
    ]


def _job(job: Job, now: float) -> dict[str, Any]:
    return {
        "request_id": job.request.request_id,
        "model": job.request.model,
        "tenant": job.tenant,
        "priority": job.priority,
        "state": job.state.name.lower(),
        "replica": job.replica or None,
        "age_s": round(now - job.arrival, 3),
        "prompt_tokens": job.prompt_tokens,
        "completion_tokens": len(job.generated),
    }


def requests(scheduler: Scheduler, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    now = clock()
    listed: list[dict[str, Any]] = []
    running = queued = 0
    for pool in scheduler.pools.values():
        running += len(pool.running)
        queued += len(pool.queue)
        for job in pool.running:
            if len(listed) < MAX_LISTED:
                listed.append(_job(job, now))
        for w in pool.queue.waiting():
            if len(listed) < MAX_LISTED:
                listed.append(_job(w.payload, now))
    return {"running": running, "queued": queued, "requests": listed}


def handlers(
    fleet: Fleet, scheduler: Scheduler, guard: Callable[[web.Request], None]
) -> tuple[Callable[[web.Request], Awaitable[web.Response]], ...]:
    async def get_replicas(request: web.Request) -> web.Response:
        guard(request)
        return web.json_response({"replicas": replicas(fleet)})

    async def get_requests(request: web.Request) -> web.Response:
        guard(request)
        return web.json_response(requests(scheduler))

    return get_replicas, get_requests
