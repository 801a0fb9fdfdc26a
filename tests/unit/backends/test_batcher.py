from __future__ import annotations

import asyncio

from engine_sidecar.backend import EngineDelta
from engine_sidecar.backends.common.batcher import StepBatcher


async def test_deltas_of_one_loop_iteration_go_out_in_one_call() -> None:
    calls: list[list[int]] = []
    batcher = StepBatcher(lambda ds: calls.append([d.key for d in ds]), asyncio.get_running_loop())

    async def consumer(key: int, ready: asyncio.Event) -> None:
        await ready.wait()
        batcher.add(EngineDelta(key, [key], "x"))

    ready = asyncio.Event()
    tasks = [asyncio.create_task(consumer(k, ready)) for k in (1, 2, 3)]
    await asyncio.sleep(0)
    ready.set()  # like vLLM's output handler waking every request of one step
    await asyncio.gather(*tasks)
    await asyncio.sleep(0)
    assert calls == [[1, 2, 3]]


async def test_discard_drops_an_aborted_request() -> None:
    calls: list[list[int]] = []
    batcher = StepBatcher(lambda ds: calls.append([d.key for d in ds]), asyncio.get_running_loop())
    batcher.add(EngineDelta(1, [1], "a"))
    batcher.add(EngineDelta(2, [2], "b"))
    batcher.discard(1)
    await asyncio.sleep(0)
    assert calls == [[2]]
