"""Shard-aware routing: replica assembly, then filters -> weighted scorers -> picker."""

from gateway.policy.routing.profile import Profile, build_profile
from gateway.policy.routing.replicas import Assembly, assemble, broken_since
from gateway.policy.routing.router import Router
from gateway.policy.routing.snapshot import EndpointSnapshot, Replica, RequestFeatures

__all__ = [
    "Assembly",
    "EndpointSnapshot",
    "Profile",
    "Replica",
    "RequestFeatures",
    "Router",
    "assemble",
    "broken_since",
    "build_profile",
]
