"""Fanout (n > 1): its buffer between the choices and the edge stays bounded."""

from __future__ import annotations

import asyncio
import math
from typing import Any, cast

import pytest

from gateway.api.fanout import Fanout, usage
from gateway.api.openai.choices import Choices
from gateway.runtime.events import EventQueue
from gateway.runtime.job import Job
from gateway.runtime.lifecycle import State
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, Finish, GatewayTimeout, GenerationRequest, Sampling, Usage


class _Endless:
    """A choice whose engine never stops producing."""

    began = True

    def __init__(self) -> None:
        self.taken = 0
        self.closed = 0

    async def take(self) -> list[Delta]:
        self.taken += 1
        await asyncio.sleep(0)
        return [Delta([1], "x")]

    def arm(self, deadline: float, first_output_s: float, *, cuts: bool = True) -> None:
        assert not cuts  # the fan-out cuts its client side itself

    def close(self) -> None:
        self.closed += 1


class _Req:
    n = 3
    choices = 3
    request_id = "r"


async def test_a_client_that_does_not_read_holds_at_most_n_batches() -> None:
    f = Fanout(cast(Any, None), cast(Any, _Req()))
    jobs = [_Endless() for _ in range(3)]
    f.jobs = cast(Any, jobs)
    f.arm(math.inf, math.inf)
    for _ in range(200):  # the loop runs the pumps; nobody calls next()
        await asyncio.sleep(0)
    assert f._items.qsize() <= 3
    assert all(j.taken <= 2 for j in jobs)  # each pump waits for room, its stream merges
    index, batch = await f.next()
    assert batch == [Delta([1], "x")] and index in (0, 1, 2)
    await f.close()
    assert [j.closed for j in jobs] == [1, 1, 1]


def test_usage_counts_the_prompt_once() -> None:
    assert usage(10, 4, [3, 5, 7]) == Usage(10, 15, 4)


class _Service:
    """Admits every choice as a real Job, placed at once."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.events = EventQueue(schedule=lambda fn: None)

    async def submit(self, child: GenerationRequest, key: str | None) -> Job:
        job = Job(child, self.events, ResponseStream(100))
        job.state, job.attempt = State.PLACED, 1
        self.jobs.append(job)
        return job


async def test_past_the_deadline_a_finished_choice_does_not_cut_the_answer() -> None:
    """Choice 0 is done, choice 1 still runs at the deadline: the client gets the timeout
    (a 504, or an error event), not a connection cut by choice 0's timer."""
    req = GenerationRequest(request_id="r", model="m", sampling=Sampling(max_tokens=9), prompt="x")
    req.n = 2
    service = _Service()
    choices = Choices(cast(Any, service), req, "completion")
    await choices.submit(None)
    loop = asyncio.get_running_loop()

    async def handler() -> object:
        choices.arm(loop.time() + 0.2, math.inf)
        try:
            return await choices.unary()
        finally:
            await choices.close()

    task = loop.create_task(handler())
    await asyncio.sleep(0)
    first, second = service.jobs
    first.push(Delta([1], "a", Finish.NONE, 3))
    first.push(Delta([2], "b", Finish.STOP, 0, 0, 2))
    second.push(Delta([1], "x", Finish.NONE, 3))
    with pytest.raises(GatewayTimeout):
        await task


async def test_a_detached_fanout_is_closed_by_its_producer_not_its_client() -> None:
    f = Fanout(cast(Any, None), cast(Any, _Req()))
    jobs = [_Endless() for _ in range(3)]
    f.jobs = cast(Any, jobs)
    f.arm(math.inf, math.inf)
    f.detach()
    await f.close()  # the client side is done: the choices go on
    assert [j.closed for j in jobs] == [0, 0, 0]
    item = await f.take()
    assert item is not None and item[1] == [Delta([1], "x")]
    await f.release()  # its producer is done
    assert [j.closed for j in jobs] == [1, 1, 1]
    f.left = 0
    assert await f.take() is None  # every choice done: the end
