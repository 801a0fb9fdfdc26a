"""Fanout (n > 1): its buffer between the choices and the edge stays bounded."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.api.fanout import Fanout, usage
from gateway.types import Delta, Usage


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

    def arm(self, deadline: float, first_output_s: float) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


class _Req:
    n = 3
    request_id = "r"


async def test_a_client_that_does_not_read_holds_at_most_n_batches() -> None:
    f = Fanout(cast(Any, None), cast(Any, _Req()))
    jobs = [_Endless() for _ in range(3)]
    f.jobs = cast(Any, jobs)
    f.arm(0.0, 0.0)
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
