"""What the runtime holds: the profile built from `routing:`, the prefix hasher, and the prompt
tokenizer of precise prefix routing."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from gateway.config.routing import RoutingSettings
from gateway.policy.ejection import OutlierDetector
from gateway.policy.routing.engine_cache import EngineCaches
from gateway.policy.routing.plugin import PluginEnv
from gateway.policy.routing.prefix import PrefixHasher
from gateway.policy.routing.profile import Profile, build_profile
from gateway.policy.routing.scorers import PrecisePrefix, Prefix
from gateway.policy.routing.snapshot import RequestFeatures
from gateway.types import GenerationRequest

if TYPE_CHECKING:
    from gateway.prompt_tokens import PromptTokens


class Router:
    """Build once per config (ValueError names a bad field); `profile.route` per request."""

    __slots__ = ("hasher", "profile", "tokens")

    def __init__(
        self,
        settings: RoutingSettings,
        outliers: OutlierDetector | None,
        rng: random.Random | None = None,
        caches: EngineCaches | None = None,
        tokens: PromptTokens | None = None,
    ) -> None:
        env = PluginEnv(rng or random.Random(settings.seed), outliers, caches)
        self.profile: Profile = build_profile(settings.profile, env)
        uses_prefix = _prefix_scorer(self.profile) is not None
        p = settings.prefix
        self.hasher = PrefixHasher(p.block_chars, p.max_blocks) if uses_prefix else None
        # Prompts are tokenized only for a scorer that matches what the engines cache.
        self.tokens = tokens if caches is not None and _precise(self.profile) else None

    def carry_over(self, previous: Router) -> None:
        """After a config reload: keep what the previous router's prefix scorer learned, when
        the prefix hashing is unchanged (otherwise the old hashes would never match)."""
        old, new = _prefix_scorer(previous.profile), _prefix_scorer(self.profile)
        if old is None or new is None or previous.hasher is None or self.hasher is None:
            return
        if (previous.hasher.block_chars, previous.hasher.max_blocks) != (
            self.hasher.block_chars,
            self.hasher.max_blocks,
        ):
            return
        for index in old.indexes.values():
            index.capacity = new.params.index_capacity
            index.owners = new.params.owners_per_block
        new.indexes = old.indexes

    def features(self, req: GenerationRequest) -> RequestFeatures:
        """Once per request (retries and migrations reuse it). Hashes the prompt only when the
        profile has a prefix scorer."""
        hashes: list[int] = []
        h = self.hasher
        if h is not None:
            if req.messages is not None:
                hashes = h.messages(req.model, req.lora, req.messages)
            else:
                hashes = h.prompt(req.model, req.lora, _prompt_text(req))
        ids = self.tokens.ids(req.model, req.generation) if self.tokens is not None else None
        return RequestFeatures(req.model, req.lora, hashes, req.session_id, ids)


def _precise(profile: Profile) -> bool:
    return any(
        isinstance(s, PrecisePrefix) or (isinstance(s, Prefix) and s.precise is not None)
        for s, _ in profile.scorers
    )


def _prefix_scorer(profile: Profile) -> Prefix | None:
    return next((s for s, _ in profile.scorers if isinstance(s, Prefix)), None)


def _prompt_text(req: GenerationRequest) -> str:
    """What prefix affinity hashes of a prompt: its text, or its token ids as text."""
    if req.prompt_token_ids is not None:
        return " ".join(map(str, req.prompt_token_ids))
    return req.prompt or ""
