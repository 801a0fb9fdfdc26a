"""Today's pick: the least-loaded replica. The runtime uses it until it switches to `Profile`;
the default profile makes the same choice (see tests/unit/policy/routing/test_profile.py)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    inflight: int  # this gateway's requests on the replica (fresh)
    running: int  # from the last load report (may include other gateways' requests)
    waiting: int
    max_num_seqs: int


def load_of(c: Candidate) -> float:
    """Occupancy: requests on the replica over its slots (above 1.0 means queueing)."""
    return (max(c.inflight, c.running) + c.waiting) / max(1, c.max_num_seqs)


def least_loaded(candidates: Sequence[Candidate], rng: random.Random) -> int:
    """Index of the candidate with the lowest occupancy; a random one among ties."""
    if not candidates:
        raise ValueError("no candidates")
    best = min(load_of(c) for c in candidates)
    ties = [i for i, c in enumerate(candidates) if load_of(c) == best]
    return ties[0] if len(ties) == 1 else rng.choice(ties)
