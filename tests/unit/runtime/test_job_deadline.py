"""A job's one timer: the first-output limit, then the deadline; what the client side sees, and
that the engine side is told at once."""

from __future__ import annotations

import asyncio

import pytest

from gateway.runtime.job import ClientGone, Job
from gateway.runtime.stream import ResponseStream
from gateway.types import (
    Delta,
    Finish,
    GatewayError,
    GatewayTimeout,
    GenerationRequest,
    Sampling,
)


class Owner:
    def __init__(self) -> None:
        self.failed_with: list[GatewayError] = []

    def finished(self, job: Job) -> None:
        pass

    def failed(self, job: Job, error: GatewayError) -> None:
        self.failed_with.append(error)


def job(owner: Owner) -> Job:
    req = GenerationRequest("r1", "m", Sampling(max_tokens=8), prompt="hi")
    return Job(req, owner, ResponseStream(64))


async def test_no_first_output_fails_with_a_504_and_tells_the_owner() -> None:
    owner = Owner()
    j = job(owner)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 10, 0.05)
    with pytest.raises(GatewayTimeout, match="engine to start"):
        await j.first_batch()
    assert j.timed_out
    [gone] = owner.failed_with
    assert isinstance(gone, ClientGone) and gone.timed_out
    j.close()


async def test_output_in_time_moves_the_timer_to_the_deadline() -> None:
    owner = Owner()
    j = job(owner)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.2, 0.05)
    j.out.push(Delta([1], "a"))
    assert await j.first_batch()
    await asyncio.sleep(0.1)  # past the first-output limit: nothing happens
    assert not owner.failed_with
    with pytest.raises(GatewayTimeout, match="deadline"):
        while True:
            await j.take()
    assert j.timed_out and len(owner.failed_with) == 1
    j.close()


async def test_a_delta_pending_when_the_first_limit_passes_counts_as_output() -> None:
    owner = Owner()
    j = job(owner)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 10, 0.01)
    j.out.push(Delta([1], "a"))  # arrived, but the client side has not taken it yet
    await asyncio.sleep(0.05)
    assert not owner.failed_with
    assert await j.first_batch()
    j.close()


async def test_close_stops_the_timer() -> None:
    owner = Owner()
    j = job(owner)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.05, 0.02)
    j.close()  # the client side is done (not finished: the owner hears ClientGone once)
    await asyncio.sleep(0.1)
    assert len(owner.failed_with) == 1 and not j.timed_out


async def test_a_client_side_stuck_outside_take_is_cancelled_at_the_deadline() -> None:
    owner = Owner()
    j = job(owner)
    stuck = asyncio.Event()

    async def client_side() -> None:
        loop = asyncio.get_running_loop()
        j.arm(loop.time() + 0.05, 10)
        j.out.push(Delta([1], "a"))
        await j.first_batch()
        await stuck.wait()  # like a write that never drains

    task = asyncio.create_task(client_side())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert j.timed_out and len(owner.failed_with) == 1


async def test_a_finished_job_whose_client_side_is_stuck_is_cut_at_the_deadline() -> None:
    owner = Owner()
    j = job(owner)
    stuck = asyncio.Event()

    async def client_side() -> None:
        loop = asyncio.get_running_loop()
        j.arm(loop.time() + 0.05, 10)
        j.out.push(Delta([1], "a"))
        await j.first_batch()
        j.push(Delta([2], "b", Finish.LENGTH, 1, 0, 2))  # the engine is done
        await stuck.wait()  # but the client is not reading

    task = asyncio.create_task(client_side())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert not owner.failed_with  # it finished: no timeout to report
