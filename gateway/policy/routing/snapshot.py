"""What routing decides on: sidecar snapshots, the replicas built from them, the request.

`AnnouncedInfo` and `LoadReport` are the parts of a sidecar's Info and load report that routing
reads; `gateway.upstream.convert.EndpointInfo` and `Load` have them, so the runtime passes
`link.info` and `link.load` as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.policy.health import Health
from gateway.policy.routing.hashing import str_hash64


class AnnouncedInfo(Protocol):
    @property
    def models(self) -> Mapping[str, int]: ...  # served model -> max_model_len
    @property
    def loras(self) -> Mapping[str, tuple[str, ...]]: ...  # served model -> adapters
    @property
    def group(self) -> str: ...  # shard group; "" = a replica of one sidecar
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def max_num_seqs(self) -> int: ...


class LoadReport(Protocol):
    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def kv_usage(self) -> float: ...
    @property
    def max_num_seqs(self) -> int: ...  # 0: see the Info
    @property
    def ready(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One sidecar as the runtime sees it now."""

    name: str
    address: str
    info: AnnouncedInfo | None  # None: it never announced itself
    load: LoadReport | None  # the last load report (None: none yet)
    health: Health
    inflight: int = 0  # this gateway's requests on this sidecar now
    # Its engine holds work and advanced none of it for a while (`progress.StallDetector`):
    # counted as a SUSPECT rank (avoided while a better replica is left; ejection, capped per
    # pool, is what takes it out).
    stalled: bool = False


@dataclass(slots=True, eq=False, kw_only=True)
class Replica:
    """One engine instance: a sidecar, or a shard group whose rank 0 takes the requests.

    Built by `replicas.assemble`. Routing only reads it. The live figures at the bottom may be
    refreshed in place by the runtime between routing calls (a load report from the rank-0
    sidecar, a request started or finished) instead of assembling again.
    """

    name: str  # the group, or the sidecar for a one-sidecar replica
    address: str  # the rank-0 sidecar's
    head: str  # the rank-0 sidecar's name
    members: tuple[str, ...] = ()  # the sidecars present, by rank
    world_size: int = 1
    models: Mapping[str, int] = field(default_factory=dict)
    loras: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    whole: bool = True  # every rank present and not DOWN
    missing_ranks: tuple[int, ...] = ()  # ranks absent or DOWN
    health: Health = Health.UP  # the worst of the present ranks
    ready: bool = True  # every rank's last report says ready
    key: int = 0  # stable hash of `name` (session affinity); derived when 0
    # -- live figures ---------------------------------------------------------------------
    max_num_seqs: int = 1
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    inflight: int = 0  # this gateway's requests on it: fresher than the report's `running`

    def __post_init__(self) -> None:
        if self.key == 0:
            self.key = str_hash64(self.name)

    @property
    def routable(self) -> bool:
        return self.whole and self.ready and self.health is not Health.DOWN

    @property
    def requests(self) -> int:
        """Requests on it: running (ours may be newer than the report) plus queued."""
        i, r = self.inflight, self.running
        return (i if i > r else r) + self.waiting

    @property
    def occupancy(self) -> float:
        """Requests over slots; above 1.0 means requests queue in the engine."""
        i, r = self.inflight, self.running
        return ((i if i > r else r) + self.waiting) / (self.max_num_seqs or 1)


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What routing needs to know about a request (built once, reused for retries)."""

    model: str
    lora: str = ""
    prefix_hashes: Sequence[int] = ()  # `prefix.PrefixHasher`; () = no prefix affinity
    session_id: str = ""  # `x-session-id`; "" = no session affinity
    # The prompt's token ids as the engine computes them (gateway/prompt_tokens.py), for
    # precise prefix routing; None: not known (routing then uses the approximate index).
    prompt_ids: Sequence[int] | None = None
    # The names of the prompt's KV blocks per block size, filled as routing needs them.
    kv_names: dict[int, list[int]] = field(default_factory=dict)
    # Per replica head it was routed to: the prompt tokens its engine held (precise prefix).
    routed: dict[str, int] = field(default_factory=dict)
