"""A store call whose caller went away is in flight until what it was given is handed back."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.shared_limits.store import Client, Store


def _store() -> Store:
    return Store(cast(Client, object()), timeout_s=5.0)  # (its calls here never touch a client)


async def _abandon(store: Store, reply: asyncio.Future[str], done_first: bool) -> list[str]:
    """A caller waits on a call answered by `reply`, and is cancelled: while the call is still
    out, or (`done_first`) in the loop pass in which the call has just ended."""
    handed_back: list[str] = []

    async def work() -> str:
        return await reply

    caller = asyncio.create_task(
        store.run("reserve", work(), on_abandoned=lambda t: handed_back.append(t.result()))
    )
    await asyncio.sleep(0)  # the caller waits on the call
    assert not store.idle()
    if done_first:
        (call,) = store._tasks
        call.add_done_callback(lambda _: caller.cancel())  # after the store's own callback
        reply.set_result("given")
    else:
        caller.cancel()
        await asyncio.sleep(0)
        assert not store.idle() and handed_back == []
        reply.set_result("given")
    waits = 0
    while not store.idle():
        assert handed_back == [], "idle only once handed back"
        waits += 1
        assert waits < 100
        await asyncio.sleep(0)
    return handed_back


async def test_a_caller_gone_during_the_call_is_in_flight_until_handed_back() -> None:
    loop: Any = asyncio.get_running_loop()
    assert await _abandon(_store(), loop.create_future(), done_first=False) == ["given"]


async def test_a_caller_gone_as_the_call_ends_is_in_flight_until_handed_back() -> None:
    loop: Any = asyncio.get_running_loop()
    assert await _abandon(_store(), loop.create_future(), done_first=True) == ["given"]
