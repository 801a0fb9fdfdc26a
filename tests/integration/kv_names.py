"""What the gateway's KV index says a sidecar's engine holds of a conversation."""

from __future__ import annotations

from typing import Any

from shardgate.v1.kvblocks import block_names, start
from shardgate.v1.params import Generation, Message, Sampling

from gateway.app import Gateway
from tests.integration.poll import until_async


async def held_whole(
    gateway: Gateway, sidecar: str, model: str, messages: list[Any], min_blocks: int
) -> list[int]:
    """Waits until the index says `sidecar`'s engine holds every whole block of `messages`'
    prompt, as the gateway names them (its tokenizer, the chat template applied): the names."""
    caches, tokens = gateway.fleet.kv.caches, gateway.fleet.kv.tokens
    block_size = caches.block_size(sidecar)
    assert block_size > 0
    g = Generation(
        request_id="r",
        model=model,
        messages=tuple(Message(role=m["role"], content=m["content"]) for m in messages),
        sampling=Sampling(max_tokens=2),
    )
    ids = tokens.ids(model, g)
    assert ids is not None and len(ids) >= min_blocks * block_size
    names = block_names(ids, block_size, start(model))
    index = caches.index
    index.speculative_s = 0.0  # (what the engine says only)
    await until_async(
        lambda: index.matched(names, 0.0).get(sidecar, 0) == len(names), 30.0, "its blocks"
    )
    return names
