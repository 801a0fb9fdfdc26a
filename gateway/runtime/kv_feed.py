"""What the engines cache, as their links tell it: the links' `KvListener`.

Each link calls it from its reader, and it applies at once (no posted event: a KV change per
engine step is the link's most frequent message after the deltas). It owns the index of every
engine's blocks (`EngineCaches`) and the prompt tokenizers that name a request's blocks alike
(`PromptTokens`, loading the tokenizer a reporting sidecar names); the supervisor configures
both from `routing.kv`.
"""

from __future__ import annotations

from shardgate.v1 import engine_pb2 as pb

from gateway.policy.routing.engine_cache import EngineCaches
from gateway.prompt_tokens import PromptTokens
from gateway.upstream.link import EngineLink


class KvFeed:
    def __init__(self) -> None:
        self.caches = EngineCaches()
        self.tokens = PromptTokens(65_536)

    def kv_announced(self, sidecar: str, info: pb.InfoReply) -> None:
        self.caches.announced(sidecar, info.kv_block_size)
        if info.kv_block_size > 0:
            for card in info.models:
                self.tokens.named(card.name, card.tokenizer)

    def kv_events(self, sidecar: str, events: pb.KvEvents) -> None:
        self.caches.apply(sidecar, events)

    def kv_lost(self, sidecar: str) -> None:
        self.caches.lost(sidecar)

    def forget(self, link: EngineLink) -> None:
        """Its sidecar left the fleet: the link (draining) tells nothing more."""
        link.kv = None
        self.caches.forget(link.name)

    async def close(self) -> None:
        await self.tokens.close()
