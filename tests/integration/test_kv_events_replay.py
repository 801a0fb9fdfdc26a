"""The sidecar's KV event subscriber against vLLM's own publisher (ZmqEventPublisher, its PUB
and replay sockets): names as the gateway computes them, batches missed while away replayed,
and a gap the replay buffer no longer covers dropping what is known."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from shardgate.v1.kvblocks import block_names, start

from engine_sidecar.backends.common.kv_events import BlockNamer, KvSubscriber
from engine_sidecar.kv_mirror import KvMirror
from gateway import tasks
from tests.engines import require
from tests.integration.poll import until_async

BS = 4


def stored(hashes: list[int], parent: int | None, tokens: list[int]) -> Any:
    from vllm.distributed.kv_events import BlockStored

    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=tokens,
        block_size=BS,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )


def batch(*events: Any) -> Any:
    from vllm.distributed.kv_events import KVEventBatch

    return KVEventBatch(ts=time.time(), events=list(events))  # (the engine's clock, as vLLM's)


@pytest.fixture
async def publisher(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    require("vllm")
    from vllm.distributed.kv_events import ZmqEventPublisher

    steps = getattr(request, "param", 100)
    pub = ZmqEventPublisher(
        0, f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay", buffer_steps=steps
    )
    yield pub
    pub.shutdown()


def subscriber(tmp_path: Path, mirror: KvMirror) -> KvSubscriber:
    return KvSubscriber(
        BlockNamer("m", mirror), f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    )


def names(tokens: list[int]) -> list[int]:
    return block_names(tokens, BS, start("m"))


async def test_blocks_are_named_from_their_parents_and_removed_by_vllms_hashes(
    publisher: Any, tmp_path: Path
) -> None:
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved

    mirror = KvMirror(BS)
    sub = subscriber(tmp_path, mirror)
    task = asyncio.create_task(sub.run())
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        tokens = list(range(1, 13))
        publisher.publish(batch(stored([b"h1", b"h2"], None, tokens[:8])))
        publisher.publish(batch(stored([b"h3"], b"h2", tokens[8:])))  # a child, later
        await until_async(lambda: len(mirror.held) == 3, what="three blocks")
        assert mirror.held == set(names(tokens))
        publisher.publish(batch(BlockRemoved(block_hashes=[b"h3"], medium="GPU")))
        await until_async(lambda: len(mirror.held) == 2, what="one removed")
        assert mirror.held == set(names(tokens[:8]))
        publisher.publish(batch(AllBlocksCleared()))
        await until_async(lambda: not mirror.held, what="cleared")
    finally:
        await tasks.stop(task)


async def test_batches_published_while_away_are_replayed(publisher: Any, tmp_path: Path) -> None:
    mirror = KvMirror(BS)
    sub = subscriber(tmp_path, mirror)
    task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 10)
    publisher.publish(batch(stored([b"a"], None, [1, 2, 3, 4])))
    await until_async(lambda: len(mirror.held) == 1, what="the first block")
    await tasks.stop(task)  # away: a reconnect
    publisher.publish(batch(stored([b"b"], b"a", [5, 6, 7, 8])))
    publisher.publish(batch(stored([b"c"], None, [9, 9, 9, 9])))
    await until_async(lambda: len(publisher._buffer) == 3, what="published")
    sub.connected.clear()
    task = asyncio.create_task(sub.run())
    try:
        await until_async(lambda: len(mirror.held) == 3, what="the replayed blocks")
        assert mirror.held == set(names([1, 2, 3, 4, 5, 6, 7, 8])) | set(names([9, 9, 9, 9]))
        assert sub.gaps == 0 and sub.replayed >= 2
    finally:
        await tasks.stop(task)


@pytest.mark.parametrize("publisher", [1], indirect=True)
async def test_a_gap_the_replay_no_longer_covers_drops_what_is_known(
    publisher: Any, tmp_path: Path
) -> None:
    mirror = KvMirror(BS)
    sub = subscriber(tmp_path, mirror)
    task = asyncio.create_task(sub.run())
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        publisher.publish(batch(stored([b"a"], None, [1, 2, 3, 4])))
        await until_async(lambda: len(mirror.held) == 1, what="the first block")
        # The stream jumps (as if batches 1 to 4 were lost on the way): the buffer of one batch
        # no longer has them, so the first block is no longer known to be held either.
        publisher._seq_gen = itertools.count(5)
        publisher.publish(batch(stored([b"z"], None, [7, 7, 7, 7])))
        await until_async(lambda: sub.gaps == 1, what="the gap")
        assert mirror.gaps == 1 and mirror.clears == 1
        await until_async(lambda: mirror.held == set(names([7, 7, 7, 7])), what="what follows")
    finally:
        await tasks.stop(task)


async def test_a_restarted_engine_numbering_again_from_zero_clears_what_it_held(
    tmp_path: Path,
) -> None:
    require("vllm")
    from vllm.distributed.kv_events import ZmqEventPublisher

    def publisher() -> Any:
        return ZmqEventPublisher(0, f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay")

    mirror = KvMirror(BS)
    sub = subscriber(tmp_path, mirror)
    first = publisher()
    task = asyncio.create_task(sub.run())
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        first.publish(batch(stored([b"a"], None, [1, 2, 3, 4])))
        first.publish(batch(stored([b"b"], None, [5, 6, 7, 8])))
        for _ in range(198):  # (its numbers go well past what the second's will be)
            first.publish(batch())
        await until_async(lambda: sub.last_seq == 199, what="the first engine's batches")
        assert len(mirror.held) == 2
        first.shutdown()
        second = publisher()  # (its batches numbered from 0 again)
        try:
            await until_async(lambda: sub.restarts == 1 or _again(second), what="a restart")
            await until_async(lambda: mirror.held == set(names([9, 9, 9, 9])), what="new blocks")
            assert sub.restarts == 1 and sub.gaps == 0
        finally:
            second.shutdown()
    finally:
        await tasks.stop(task)


def _again(pub: Any) -> bool:
    """Publish the second engine's first block until the subscriber (reconnecting) sees it."""
    pub.publish(batch(stored([b"z"], None, [9, 9, 9, 9])))
    return False
