"""Pickers: choose one replica from the weighted scores."""

from __future__ import annotations

import random
from collections.abc import Sequence


class MaxScore:
    """The highest score; a random one among ties (`rng` injected, so tests are exact)."""

    __slots__ = ("rng",)

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, scores: Sequence[float]) -> int:
        best = max(scores)
        ties = [i for i, s in enumerate(scores) if s == best]
        return ties[0] if len(ties) == 1 else self.rng.choice(ties)


class Random:
    """Any replica, uniformly (a baseline for benchmarks)."""

    __slots__ = ("rng",)

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, scores: Sequence[float]) -> int:
        return self.rng.randrange(len(scores))
