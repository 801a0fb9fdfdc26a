"""A job's last delta: its client side is woken before the scheduler settles it (metrics, the
request's log line, the next queued request), so that the answer leaves first."""

from __future__ import annotations

import asyncio

from gateway.runtime.events import EventQueue, Finished
from gateway.runtime.job import Job
from gateway.runtime.lifecycle import State
from gateway.runtime.stream import ResponseStream
from gateway.types import Delta, Finish, GenerationRequest, Sampling


async def test_the_client_side_runs_before_the_finished_event_is_handled() -> None:
    order: list[str] = []
    events = EventQueue()  # (drained by the running loop, as the gateway's is)
    events.register(Finished, lambda ev: order.append("settled"))
    req = GenerationRequest("r1", "m", Sampling(max_tokens=1), prompt="hi")
    j = Job(req, events, ResponseStream(64))
    j.state = State.PLACED

    async def client() -> None:
        batch = await j.take()
        order.append(f"answered {len(batch)}")

    task = asyncio.create_task(client())
    await asyncio.sleep(0)  # it waits for output
    assert j.out.waiting
    j.push(Delta(text="a", token_ids=[7], finish=Finish.LENGTH))
    await task  # (the event was handled in the same pass of the loop, after the client)
    assert order == ["answered 1", "settled"]
    assert j.state is State.DONE
