"""Config for tenants, rate limits and scheduling (the top-level `tenants:`, `anonymous:`,
`scheduling:` and `model_limits:` sections).

Every section has defaults such that an empty config means: anonymous access, no rate limits,
and only the scheduler's safety bounds (queue depth and wait).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

# Priority classes are bounded so that per-class scheduler state stays small.
PRIORITY_MIN = -1000
PRIORITY_MAX = 1000

Priority = Annotated[int, msgspec.Meta(ge=PRIORITY_MIN, le=PRIORITY_MAX)]
Rate = Annotated[float, msgspec.Meta(gt=0)]
Burst = Annotated[int, msgspec.Meta(ge=1)]
Count = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Weight = Annotated[float, msgspec.Meta(gt=0)]
Millis = Annotated[float, msgspec.Meta(gt=0, le=3_600_000)]
ApiKey = Annotated[str, msgspec.Meta(min_length=1)]
Name = Annotated[str, msgspec.Meta(min_length=1)]
# What a request body's fields that its API declares none for get (policy/unknown_fields.py).
UnknownFieldsMode = Literal["warn", "reject"]


class _Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class ObjectiveConfig(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Latency targets, in milliseconds: time to first token, and time per output token after
    it. A field left out sets no target on that figure."""

    ttft_ms: Millis | None = None
    tpot_ms: Millis | None = None


class RateLimits(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Two token buckets. A rate left out means no limit. A burst left out defaults to one
    second of requests (at least 1) and one minute of tokens."""

    requests_per_s: Rate | None = None
    requests_burst: Burst | None = None
    tokens_per_min: Rate | None = None
    tokens_burst: Burst | None = None

    def __post_init__(self) -> None:
        if self.requests_burst is not None and self.requests_per_s is None:
            raise ValueError("requests_burst needs requests_per_s")
        if self.tokens_burst is not None and self.tokens_per_min is None:
            raise ValueError("tokens_burst needs tokens_per_min")


class ModelOverride(RateLimits, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A tenant's settings for one model; a field left out keeps the tenant's value."""

    max_concurrent: Count | None = None
    default_priority: Priority | None = None
    max_priority: Priority | None = None


class TenantConfig(RateLimits, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: Name
    # Keys that map to this tenant. None is fine for the tenant named by `anonymous:`.
    keys: list[ApiKey] = []
    max_concurrent: Count | None = None
    default_priority: Priority = 0
    # The highest class a request may ask for; left out: the default class.
    max_priority: Priority | None = None
    # Share of the queue within a priority class (weighted fair queuing by tokens).
    weight: Weight = 1.0
    models: dict[str, ModelOverride] = {}
    # Its streams kept for resume (true) or not (false) unless a request says otherwise;
    # left out: as `gateway.resumable_streams` lists their routes.
    resumable_streams: bool | None = None
    # Its requests' unknown body fields: "warn" or "reject"; left out: `gateway.unknown_fields`.
    unknown_fields: UnknownFieldsMode | None = None
    # Its requests' latency targets unless a request sets its own (before its class's).
    objectives: ObjectiveConfig | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"tenant {self.name!r} lists a key twice")
        for model in (None, *self.models):
            default, top = self.priorities(model)
            if default > top:
                where = f"models.{model}: " if model is not None else ""
                raise ValueError(f"{where}default_priority {default} is above max_priority {top}")

    def priorities(self, model: str | None = None) -> tuple[int, int]:
        """(default class, highest class) for `model`: an override's field, else the tenant's;
        a max left out everywhere is the default class."""
        o = self.models.get(model) if model is not None else None
        default = self.default_priority
        top = self.max_priority
        if o is not None:
            default = default if o.default_priority is None else o.default_priority
            top = top if o.max_priority is None else o.max_priority
        return default, default if top is None else top


class QueueBounds(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Bounds of one priority class's waiting line in one model pool."""

    max_depth: Count = 1000
    max_wait_s: Seconds = 30.0
    # The class's latency targets for requests that set none (and whose tenant sets none).
    objectives: ObjectiveConfig | None = None


class PreemptionConfig(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    # A request preempted this many times is no longer a victim.
    max_per_request: Annotated[int, msgspec.Meta(ge=0)] = 3
    # A resumed stream runs at least this long (since its restart) before it is preempted again.
    min_run_s: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    # Sheddable victims are rejected (503) instead of paused and resumed.
    reject_sheddable: bool = False


class SchedulingConfig(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Waiting requests per model pool, all classes together; when full, a higher-class arrival
    # evicts the newest waiter of the lowest class below it.
    max_queued: Count = 10_000
    # Bounds of each class not listed in `classes` (keys are priority classes).
    default: QueueBounds = QueueBounds()
    classes: dict[int, QueueBounds] = {}
    # Classes below this are sheddable.
    sheddable_below: Priority = 0
    # Retry-After of requests refused or evicted by the queue.
    retry_after_s: Seconds = 1.0
    preemption: PreemptionConfig = PreemptionConfig()
    # Scheduling to latency targets: earliest deadline first within a tenant's line, sheddable
    # requests that can no longer make their TTFT refused early, no preemption that makes its
    # victim miss its own. False: targets are only measured (goodput), not scheduled to.
    objectives: bool = True

    def __post_init__(self) -> None:
        bad = [p for p in self.classes if not PRIORITY_MIN <= p <= PRIORITY_MAX]
        if bad:
            raise ValueError(f"classes: priority {bad[0]} out of [{PRIORITY_MIN}, {PRIORITY_MAX}]")

    def bounds(self, priority: int) -> QueueBounds:
        return self.classes.get(priority, self.default)


def check_tenancy(tenants: Sequence[TenantConfig], anonymous: str | None) -> None:
    """The cross-field checks: unique names and keys, `anonymous` names a tenant."""
    names: set[str] = set()
    keys: set[str] = set()
    for t in tenants:
        if t.name in names:
            raise ValueError(f"tenants: duplicate name {t.name!r}")
        names.add(t.name)
        for k in t.keys:
            if k in keys:
                raise ValueError(f"tenants: tenant {t.name!r} reuses a key of another tenant")
            keys.add(k)
    if anonymous is not None and anonymous not in names:
        raise ValueError(f"anonymous: {anonymous!r} is not a tenant")
