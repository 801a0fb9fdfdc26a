"""A pool's running jobs, counted by class."""

from __future__ import annotations

from gateway.runtime.events import EventQueue
from gateway.runtime.job import Job
from gateway.runtime.pool import Running
from gateway.runtime.stream import ResponseStream
from gateway.types import GenerationRequest, Sampling


def job(priority: int) -> Job:
    req = GenerationRequest("r", "m", Sampling(max_tokens=1), prompt="p")
    return Job(req, EventQueue(schedule=lambda fn: None), ResponseStream(8), priority=priority)


def test_the_lowest_class_follows_what_starts_and_ends() -> None:
    running = Running()
    assert running.lowest() is None and not running and len(running) == 0
    a, b, c = job(5), job(0), job(0)
    for j in (a, b, c):
        running.add(j)
    running.add(b)  # again: counted once
    assert list(running) == [a, b, c] and running.lowest() == 0
    assert running.discard(b) and running.lowest() == 0  # c is still of class 0
    assert running.discard(c) and running.lowest() == 5
    assert not running.discard(c)  # not running: nothing changes
    assert running.lowest() == 5 and c not in running and a in running
    assert running.discard(a) and running.lowest() is None
