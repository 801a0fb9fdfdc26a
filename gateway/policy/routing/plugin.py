"""The three kinds of routing plugin (as llm-d's scheduler has them), and what they are built
with. Each plugin is a small class; `profile` strings them together."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from gateway.policy.ejection import OutlierDetector
from gateway.policy.routing.engine_cache import EngineCaches
from gateway.policy.routing.snapshot import Replica, RequestFeatures


class Filter(Protocol):
    def filter(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> Sequence[Replica]:
        """The replicas kept, in their order (the input itself when all are kept)."""
        ...


class Scorer(Protocol):
    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        """One score in [0, 1] per replica, higher is better."""
        ...

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        """The request was routed to `replica` (a scorer with memory records it)."""
        ...


class Picker(Protocol):
    def pick(self, scores: Sequence[float]) -> int:
        """The index of the chosen replica (`scores` is never empty)."""
        ...


class Params(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A plugin's params (from its config `params:`); this base one takes none."""


@dataclass(frozen=True, slots=True)
class PluginEnv:
    """What a plugin factory may use besides its params."""

    rng: random.Random
    outliers: OutlierDetector | None = None
    # What the engines report they cache (None: nothing; the precise scorer then matches none).
    caches: EngineCaches | None = None
