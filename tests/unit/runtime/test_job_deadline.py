"""A job's one deadline: the first-output limit (counted from the moment the request reaches an
engine), then the deadline; what the client side sees, and that the scheduler hears of it at
once (a `Left` event)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.runtime.deadlines import Deadlines
from gateway.runtime.events import EventQueue, Left
from gateway.runtime.job import Job
from gateway.runtime.lifecycle import State
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, Finish, GatewayTimeout, GenerationRequest, Sampling, keepalive


class Events(EventQueue):
    """Keeps what is posted, handles nothing."""

    def __init__(self) -> None:
        super().__init__(schedule=lambda fn: None)
        self.posted: list[object] = []

    def post(self, event: object) -> None:
        self.posted.append(event)

    def left(self) -> list[Left]:
        return [e for e in self.posted if isinstance(e, Left)]


def job(events: Events) -> Job:
    req = GenerationRequest("r1", "m", Sampling(max_tokens=8), prompt="hi")
    return Job(req, events, ResponseStream(64))


def place(j: Job) -> None:
    """What the scheduler does when it submits the job to an engine."""
    j.state = State.PLACED
    j.placed()


async def test_no_first_output_from_the_engine_fails_with_a_504_and_tells_the_scheduler() -> None:
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 10, 0.05)
    place(j)
    with pytest.raises(GatewayTimeout, match="engine to start"):
        await j.take()
    assert j.timed_out
    [gone] = events.left()
    assert gone.job is j and gone.timed_out
    j.close()
    assert len(events.left()) == 1


async def test_time_in_the_queue_does_not_count_toward_the_first_output_limit() -> None:
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.3, 0.01)  # queued for the whole time: only the deadline applies
    with pytest.raises(GatewayTimeout, match="deadline"):
        while True:
            await j.take()
    assert len(events.left()) == 1
    j.close()


async def test_a_keepalive_while_queued_is_not_output() -> None:
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 10, 0.05)
    j.out.push(keepalive())  # what the scheduler sends a queued client
    assert await j.take() and not j.began
    place(j)  # placed, and then the engine says nothing
    with pytest.raises(GatewayTimeout, match="engine to start"):
        await j.take()
    j.close()


async def test_output_in_time_moves_the_timer_to_the_deadline() -> None:
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.2, 0.05)
    place(j)
    j.push(Delta([1], "a"))
    assert await j.take() and j.began and j.state is State.STREAMING
    with pytest.raises(GatewayTimeout, match="deadline"):  # not "engine to start"
        while True:
            await j.take()
    assert j.timed_out and len(events.left()) == 1
    j.close()


async def test_a_delta_pending_when_the_first_limit_passes_counts_as_output() -> None:
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.2, 0.01)
    place(j)
    j.push(Delta([1], "a"))  # arrived, but the client side has not taken it yet
    with pytest.raises(GatewayTimeout, match="deadline"):  # only the deadline ends it
        while True:
            await j.take()
    j.close()


async def test_close_takes_its_deadline_off_the_wheel_and_tells_the_scheduler_once() -> None:
    events = Events()
    wheel = Deadlines()
    req = GenerationRequest("r1", "m", Sampling(max_tokens=8), prompt="hi")
    j = Job(req, events, ResponseStream(64), deadlines=wheel)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.05, 0.02)
    assert len(wheel) == 1
    j.close()  # the client side is done (not finished: the scheduler hears Left once)
    assert len(wheel) == 0 and j._timer is None
    [gone] = events.left()
    assert not gone.timed_out and not j.timed_out


async def test_a_client_side_stuck_outside_take_is_cancelled_at_the_deadline() -> None:
    events = Events()
    j = job(events)
    stuck = asyncio.Event()

    async def client_side() -> None:
        loop = asyncio.get_running_loop()
        j.arm(loop.time() + 0.05, 10)
        place(j)
        j.push(Delta([1], "a"))
        await j.take()
        await stuck.wait()  # like a write that never drains

    task = asyncio.create_task(client_side())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert j.timed_out and len(events.left()) == 1


async def test_a_finished_job_whose_client_side_is_stuck_is_cut_at_the_deadline() -> None:
    events = Events()
    j = job(events)
    stuck = asyncio.Event()

    async def client_side() -> None:
        loop = asyncio.get_running_loop()
        j.arm(loop.time() + 0.05, 10)
        place(j)
        j.push(Delta([1], "a"))
        await j.take()
        j.push(Delta([2], "b", Finish.LENGTH, 1, 0, 2))  # the engine is done
        await stuck.wait()  # but the client is not reading

    task = asyncio.create_task(client_side())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert j.state is State.DONE
    assert not events.left()  # it finished: no timeout to report


async def test_a_request_off_its_engine_is_not_held_to_the_first_output_limit() -> None:
    """Preempted (or failed) before its first token, it waits in the queue again: only the
    deadline applies until it is placed again."""
    events = Events()
    j = job(events)
    loop = asyncio.get_running_loop()
    j.arm(loop.time() + 0.3, 0.02)
    place(j)
    j.state = State.PREEMPTED  # what the scheduler does when a higher class takes its slot
    j.left_engine()
    with pytest.raises(GatewayTimeout, match="deadline"):  # not "engine to start"
        while True:
            await j.take()
    j.close()


async def test_once_ended_its_entry_is_for_the_deadline_only() -> None:
    """An ended job's first-output limit no longer applies: when its entry comes after that
    limit, it goes back on the wheel for the deadline, not for the limit that has passed
    (which would expire it again at once, and again)."""
    came = asyncio.Event()

    class Counting(Job):
        __slots__ = ("expired",)

        def expire(self) -> None:
            self.expired += 1
            super().expire()
            came.set()

    events = Events()
    wheel = Deadlines()
    req = GenerationRequest("r1", "m", Sampling(max_tokens=8), prompt="hi")
    j = Counting(req, events, ResponseStream(64), deadlines=wheel)
    j.expired = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    j.arm(deadline, 0.02)
    place(j)
    j.state = State.DONE  # ended, with no output seen here (as the test sets it)
    await asyncio.wait_for(came.wait(), 10)  # its first-output limit's entry came
    assert j.expired == 1 and len(wheel) == 1
    assert j._due == deadline  # back on the wheel, for the deadline
    j.close()
