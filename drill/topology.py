"""Replicas from the sidecars' announcements, as the gateway assembles them (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from drill.engine import SidecarInfo


def replica_count(sidecars: Sequence[SidecarInfo]) -> int:
    """Standalone sidecars, plus one per shard group that has a rank 0."""
    groups = {s.group for s in sidecars if not s.standalone and s.rank == 0}
    return sum(1 for s in sidecars if s.standalone) + len(groups)


def head_of(target: SidecarInfo, sidecars: Sequence[SidecarInfo]) -> str:
    """The address that takes the requests of `target`'s replica (its group's rank 0)."""
    if target.standalone:
        return target.address
    for s in sidecars:
        if s.group == target.group and s.rank == 0:
            return s.address
    return target.address
