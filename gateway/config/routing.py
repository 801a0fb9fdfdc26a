"""Config for routing, sidecar health and retries (the top-level `routing:`, `health:` and
`retry:` sections).

An empty config gives: the default routing profile (serves the model, not ejected, healthy, a
free slot; least loaded plus prefix affinity with a load bound; max score), heartbeats judged by
the interval each sidecar announces, Envoy-style outlier ejection, and a Finagle-style retry
budget. Plugin type names and their params are checked when the profile is built
(`gateway.policy.routing.profile.build_profile`), with errors that name the field.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

Seconds = Annotated[float, msgspec.Meta(gt=0)]
Name = Annotated[str, msgspec.Meta(min_length=1)]
Weight = Annotated[float, msgspec.Meta(ge=0)]
Intervals = Annotated[float, msgspec.Meta(gt=0)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]


class _Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class PluginSpec(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A filter or picker: a registered type name and its params."""

    type: Name
    params: dict[str, Any] = {}


class ScorerSpec(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A scorer: scores in [0, 1] per replica, multiplied by `weight` (0 turns it off)."""

    type: Name
    weight: Weight = 1.0
    params: dict[str, Any] = {}


# `not_ejected` before `healthy`: its panic threshold counts the SUSPECT replicas that
# `healthy` sets aside while UP ones are left.
DEFAULT_FILTERS = (
    PluginSpec(type="serves"),
    PluginSpec(type="not_ejected"),
    PluginSpec(type="healthy"),
    PluginSpec(type="free_slot"),
)
DEFAULT_SCORERS = (ScorerSpec(type="load", weight=1.0), ScorerSpec(type="prefix", weight=1.0))


class ProfileSpec(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Filters (in order) -> weighted scorers -> picker."""

    name: Name = "default"
    filters: tuple[PluginSpec, ...] = DEFAULT_FILTERS
    scorers: tuple[ScorerSpec, ...] = DEFAULT_SCORERS
    picker: PluginSpec = PluginSpec(type="max_score")


class PrefixHashSettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How the gateway hashes a prompt's leading blocks for prefix affinity: 256 characters is
    about 64 tokens (four 16-token KV blocks), and 64 blocks cover the first ~16k characters.
    Hashing costs about half a microsecond per block; 0 blocks turns prefix affinity off.
    """

    block_chars: Annotated[int, msgspec.Meta(ge=1, le=65536)] = 256
    max_blocks: Annotated[int, msgspec.Meta(ge=0, le=4096)] = 64


class KvSettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The engines' own reports of their prefix caches (KV events), for precise prefix routing.

    `max_blocks` bounds the gateway's index (about 190 bytes per cached block: a million is
    ~190 MB); `speculative_s` is how long a request just routed counts as cached on its replica
    before its engine's events say so; prompts are tokenized at the gateway up to
    `max_prompt_chars` characters (its cost per request); `tokenizers` names a model's
    tokenizer where its sidecars name one the gateway cannot read (model -> a Hugging Face
    tokenizer's directory or name, or "sim").
    """

    max_blocks: Annotated[int, msgspec.Meta(ge=1)] = 1_000_000
    max_speculative: Annotated[int, msgspec.Meta(ge=0)] = 100_000
    speculative_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 2.0
    max_prompt_chars: Annotated[int, msgspec.Meta(ge=1)] = 65_536
    tokenizers: dict[str, str] = {}


class RoutingSettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    profile: ProfileSpec = ProfileSpec()
    prefix: PrefixHashSettings = PrefixHashSettings()
    kv: KvSettings = KvSettings()
    # Seed for the picker's tie-breaking (benchmarks, tests); None: seeded from the OS.
    seed: int | None = None


class EjectionSettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Passive outlier ejection (Envoy's consecutive-5xx detector)."""

    enabled: bool = True
    consecutive_failures: Annotated[int, msgspec.Meta(ge=1)] = 5
    base_ejection_time_s: Seconds = 30.0
    max_ejection_time_s: Seconds = 300.0
    # At most this share of a model pool's live replicas (those not DOWN) ejected at once, for
    # failures or stalls alike, and never the last live one: ejection never empties a pool ...
    max_ejection_percent: Percent = 50.0
    # ... except that one replica may always be ejected when none is (Envoy's
    # `always_eject_one_host`), so that small pools are protected too (still never the last).
    always_eject_one: bool = True
    # When fewer than this share of the replicas routing may use is left un-ejected, routing
    # ignores ejection and uses them all (Envoy's `healthy_panic_threshold`; 0: never).
    healthy_panic_threshold: Percent = 50.0
    # Each interval a replica spends un-ejected takes one step off its ejection-time multiplier.
    decay_interval_s: Seconds = 10.0

    def __post_init__(self) -> None:
        if self.max_ejection_time_s < self.base_ejection_time_s:
            raise ValueError("max_ejection_time_s must be at least base_ejection_time_s")


class HealthSettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # None: the interval each sidecar announces in its Info.
    heartbeat_interval_s: Seconds | None = None
    # Without a heartbeat for this many intervals: SUSPECT (avoided), then DOWN (not routable).
    suspect_after_intervals: Intervals = 2.0
    down_after_intervals: Intervals = 5.0
    # A live sidecar whose engine holds work and advances none of it for this long is stalled:
    # its streams migrate and it is ejected (None: engine progress is not judged). A healthy
    # engine steps every few milliseconds to a fraction of a second (chunked prefill bounds even
    # a long prompt's steps), and progress is read from heartbeats (0.5 s apart by default):
    # 10 s is far above both, and a small part of a long generation's deadline.
    stall_timeout_s: Seconds | None = 10.0
    # An engine's first step (a cold engine compiles and warms up in it) is judged only after
    # this plus the stall timeout, and for this long after it the stall timeout is at least this
    # (0: no grace).
    stall_startup_grace_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 30.0
    # The stall timeout is at least this many times the longest wait between two progress
    # reports seen over the engine's recent steps: a slow engine is not a stalled one (0: off).
    stall_step_multiplier: Annotated[float, msgspec.Meta(ge=0, le=1000)] = 4.0
    ejection: EjectionSettings = EjectionSettings()

    def __post_init__(self) -> None:
        if self.down_after_intervals <= self.suspect_after_intervals:
            raise ValueError("down_after_intervals must be above suspect_after_intervals")
        interval = self.heartbeat_interval_s
        stall = self.stall_timeout_s
        if stall is not None and interval is not None and stall <= 2 * interval:
            raise ValueError(
                "stall_timeout_s must be above two heartbeat intervals (progress comes with them)"
            )


class RetrySettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Per request: attempts before the first token (the first one included), and migrations of a
    # stream that already started (its replica broke; resumed elsewhere from prompt + tokens).
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=10)] = 3
    max_migrations: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    # Global budget (Finagle's RetryBudget): over the last `budget_window_s`, retries may be
    # `budget_ratio` of requests, plus `min_retries_per_s` whatever the traffic.
    budget_ratio: Annotated[float, msgspec.Meta(ge=0, le=10)] = 0.2
    min_retries_per_s: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    budget_window_s: Seconds = 10.0
