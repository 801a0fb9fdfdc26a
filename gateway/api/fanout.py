"""n > 1: n engine requests that share the prompt, their outputs merged by choice index.

As vLLM's parallel sampling does it: choice i is its own engine request, with the seed plus i
when a seed is given. Each choice is a job of its own (admitted, queued, placed, preempted and
resumed alone), so capacity counts n slots; they share a session, so the router sends them to
one replica, whose prefix cache then serves the prompt to all but the first. Refused as a
whole: when any choice is refused (a rate limit, a full queue), the ones already admitted are
dropped (`close`) and the client gets that refusal. Each API edge renders the batches.

Bounded like one request: at most n batches wait between the choices' streams and the edge
(a choice whose client side lags waits in its own stream, which merges what it holds).

A streamed Fanout whose client left may go on without it (`detach`): it is then a Source of a
detached producer (gateway/streams/producer.py), which owns it from then on and closes it.
"""

from __future__ import annotations

import asyncio
import math

from gateway import tasks
from gateway.runtime.job import CUT_AFTER_S, Job
from gateway.runtime.service import Service
from gateway.types import Delta, GatewayError, GenerationRequest, Usage

# One batch of a choice's deltas (an empty one: the choice is done), or its error.
_Item = tuple[int, list[Delta], GatewayError | None]


class Fanout:
    def __init__(self, service: Service, req: GenerationRequest) -> None:
        self.req = req
        self.jobs: list[Job] = []
        self._service = service
        self._items: asyncio.Queue[_Item] = asyncio.Queue(maxsize=req.choices)
        self._pumps: list[asyncio.Task[None]] = []
        self.left = req.choices  # choices not done
        self._cut: asyncio.TimerHandle | None = None
        self._cut_at = math.inf  # loop time
        self.detached = False  # a detached producer owns it: the client side's close is not
        # the end

    async def submit(self, api_key: str | None) -> None:
        """Admit every choice, or raise the first refusal (`close` drops those admitted)."""
        req = self.req
        session = req.session_id or f"choices:{req.request_id}"
        for i in range(req.choices):
            child = req.child(i)
            child.session_id = session
            if self.jobs:  # the model the first was given (a fallback's, an adapter's)
                child.model = self.jobs[0].request.served_model
            self.jobs.append(await self._service.submit(child, api_key))

    def arm(self, deadline: float, first_output_s: float) -> None:
        """Start each choice's clock (Job.arm), and the pumps that feed `next`. A choice past
        the deadline fails (its error reaches `next`); the client side itself is cut, as a
        request's is, once it is still there CUT_AFTER_S past the deadline (stuck in a write to
        a client that stopped reading): by this one timer, not by each choice's."""
        for job in self.jobs:
            job.arm(deadline, first_output_s, cuts=False)
        loop = asyncio.get_running_loop()
        self._cut_at = deadline + CUT_AFTER_S
        self.handover()
        self._pumps = [
            loop.create_task(self._pump(i, job), name=f"choice-{i}-{self.req.request_id}")
            for i, job in enumerate(self.jobs)
        ]

    def handover(self) -> None:
        """The client side is the current task: the deadline's cut cancels this one."""
        if self._cut is not None:
            self._cut.cancel()
            self._cut = None
        task = asyncio.current_task()
        if task is not None and self._cut_at != math.inf:
            self._cut = asyncio.get_running_loop().call_at(self._cut_at, task.cancel)

    def detach(self) -> None:
        """Its client left: a detached producer takes it over (and closes it)."""
        self.detached = True

    async def take(self) -> tuple[int, list[Delta]] | None:
        """`next`, as a detached producer's Source (None: every choice is done)."""
        if not self.left:
            return None
        return await self.next()

    async def close(self) -> None:
        """The client is done: every choice's engine request ends, the pumps stop (unless a
        detached producer owns it now: it closes it when it is done)."""
        if not self.detached:
            await self.release()

    async def release(self) -> None:
        """Every choice's engine request ends, the pumps stop."""
        if self._cut is not None:
            self._cut.cancel()
        for job in self.jobs:
            job.close()
        await tasks.stop_all(self._pumps)

    async def _pump(self, index: int, job: Job) -> None:
        put = self._items.put
        try:
            while batch := await job.take():
                await put((index, batch, None))
        except GatewayError as e:
            await put((index, [], e))
            return
        job.close()  # its engine side is over: its timer goes
        await put((index, [], None))

    async def next(self) -> tuple[int, list[Delta]]:
        """The next batch of any choice (an empty one: that choice is done); raises the first
        error of any choice."""
        index, batch, error = await self._items.get()
        if error is not None:
            raise error
        if not batch:
            self.left -= 1
        return index, batch

    @property
    def served_model(self) -> str:
        """The model the answer names: the one that serves it (a fallback, an adapter)."""
        return self.jobs[0].request.served_model

    @property
    def began(self) -> bool:
        return any(job.began for job in self.jobs)


def usage(prompt: int, cached: int, completions: list[int]) -> Usage:
    """The prompt once, every choice's tokens (as vLLM counts n choices)."""
    return Usage(prompt, sum(completions), cached)
