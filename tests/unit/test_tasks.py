"""Stopping an owned task ends the task, never the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from gateway import tasks


async def test_stop_cancels_and_waits_for_the_task() -> None:
    ended = asyncio.Event()

    async def worker() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    t = asyncio.create_task(worker())
    await asyncio.sleep(0)
    await tasks.stop(t)
    assert t.cancelled() and ended.is_set()


async def test_the_callers_cancellation_propagates_through_stop() -> None:
    release = asyncio.Event()
    stopping = asyncio.Event()

    async def stubborn() -> None:  # takes a while to stop, like a task cleaning up
        try:
            await asyncio.Event().wait()
        finally:
            stopping.set()
            await release.wait()

    async def owner() -> None:
        t = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        await tasks.stop(t)
        raise AssertionError("the owner went on after it was cancelled")

    o = asyncio.create_task(owner())
    await stopping.wait()
    o.cancel()  # the owner itself is cancelled while it waits for its task
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await o
    assert o.cancelled()


async def test_what_a_stopped_task_raised_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken() -> None:
        raise ValueError("boom")

    t = asyncio.create_task(broken(), name="broken-one")
    await asyncio.sleep(0)
    await tasks.stop(t)
    assert "broken-one failed before it was stopped" in caplog.text
