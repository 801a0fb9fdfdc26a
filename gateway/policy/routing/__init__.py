"""Shard-aware routing: replica assembly, then filters -> weighted scorers -> picker.

`Candidate`/`least_loaded` are today's pick, kept until the runtime uses `Router`.
"""

from gateway.policy.routing.legacy import Candidate, least_loaded, load_of
from gateway.policy.routing.profile import Profile, build_profile
from gateway.policy.routing.replicas import Assembly, assemble, broken_since
from gateway.policy.routing.router import Router
from gateway.policy.routing.snapshot import EndpointSnapshot, Replica, RequestFeatures

__all__ = [
    "Assembly",
    "Candidate",
    "EndpointSnapshot",
    "Profile",
    "Replica",
    "RequestFeatures",
    "Router",
    "assemble",
    "broken_since",
    "build_profile",
    "least_loaded",
    "load_of",
]
