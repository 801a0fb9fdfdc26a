"""What the runtime holds: the profile built from `routing:` and the prefix hasher."""

from __future__ import annotations

import random

from gateway.config.routing import RoutingSettings
from gateway.policy.ejection import OutlierDetector
from gateway.policy.routing.plugin import PluginEnv
from gateway.policy.routing.prefix import PrefixHasher
from gateway.policy.routing.profile import Profile, build_profile
from gateway.policy.routing.scorers import Prefix
from gateway.policy.routing.snapshot import RequestFeatures
from gateway.types import GenerationRequest


class Router:
    """Build once per config (ValueError names a bad field); `profile.route` per request."""

    __slots__ = ("hasher", "profile")

    def __init__(
        self,
        settings: RoutingSettings,
        outliers: OutlierDetector | None,
        rng: random.Random | None = None,
    ) -> None:
        env = PluginEnv(rng or random.Random(settings.seed), outliers)
        self.profile: Profile = build_profile(settings.profile, env)
        uses_prefix = _prefix_scorer(self.profile) is not None
        p = settings.prefix
        self.hasher = PrefixHasher(p.block_chars, p.max_blocks) if uses_prefix else None

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
        return RequestFeatures(req.model, req.lora, hashes, req.session_id)


def _prefix_scorer(profile: Profile) -> Prefix | None:
    return next((s for s, _ in profile.scorers if isinstance(s, Prefix)), None)


def _prompt_text(req: GenerationRequest) -> str:
    """What prefix affinity hashes of a prompt: its text, or its token ids as text."""
    if req.prompt_token_ids is not None:
        return " ".join(map(str, req.prompt_token_ids))
    return req.prompt or ""
