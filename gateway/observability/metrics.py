"""Every gateway metric, behind small methods the request path calls.

Each Gateway owns one `GatewayMetrics` with its own CollectorRegistry, so tests can run several
gateways in one process. Label values come from closed sets: models announced or priced
(`add_models`), tenants from config plus `anonymous` (`set_tenants`), outcomes and rejection
reasons from the enums in `labels`, classes as small integers. Anything else is recorded as
`other`, so a client-chosen string can never mint a series.

The hot path (`request_done`, `itl`, `queue_wait`) reuses label-bound children cached in dicts;
histograms are `LoopHistogram`s (a bisect and an add per observation). Call it from the event
loop thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from gateway.config.pricing import ModelPrice, Pricing
from gateway.observability.callbacks import CallbackCollector
from gateway.observability.histogram import HistogramChild, LoopHistogram
from gateway.observability.labels import (
    ANONYMOUS,
    OTHER,
    Outcome,
    ProtocolError,
    RejectReason,
    ReplicaState,
    class_label,
    outcome_label,
    reason_of,
)
from gateway.observability.objective_metrics import ObjectiveMetrics
from gateway.observability.redis_metrics import RedisMetrics

__all__ = ["GatewayMetrics"]

# Seconds. TTFT 5 ms .. 60 s and ITL 1 ms .. 5 s; 0.5 is a bound of both, the alerts' threshold.
TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 60.0)  # fmt: skip
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
               0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)  # fmt: skip
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 240.0,
               480.0, 600.0)  # fmt: skip
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                 30.0, 60.0)  # fmt: skip

_HEX = re.compile(r"[0-9a-fA-F]{1,64}")


@dataclass(slots=True)
class _ModelChildren:
    ttft: HistogramChild
    itl: HistogramChild
    e2e: HistogramChild


@dataclass(slots=True)
class _Usage:
    prompt: Counter
    completion: Counter
    cached: Counter
    cost: Counter
    price: ModelPrice | None


class GatewayMetrics:
    def __init__(
        self,
        pricing: Pricing | None = None,
        *,
        models: Iterable[str] = (),
        tenants: Iterable[str] = (),
    ) -> None:
        self.registry = r = CollectorRegistry()
        self._pricing = Pricing()
        self._models: set[str] = set()
        self._tenants: set[str] = set(tenants)
        self._by_model: dict[str, _ModelChildren] = {}
        self._usage: dict[tuple[str, str], _Usage] = {}
        self._outcomes: dict[tuple[str, str, int], Counter] = {}
        self._queue: dict[tuple[str, int], HistogramChild] = {}

        self._requests = Counter(
            "shardgate_requests", "Finished requests.", ["model", "outcome", "class"], registry=r
        )
        self._ttft = self._histogram(
            "shardgate_time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS
        )
        self._itl = self._histogram(
            "shardgate_inter_token_latency_seconds", "Time between tokens.", ITL_BUCKETS
        )
        self._e2e = self._histogram(
            "shardgate_e2e_request_latency_seconds", "Arrival to last byte.", E2E_BUCKETS
        )
        self._queue_wait = self._histogram(
            "shardgate_queue_wait_seconds", "Time queued before dispatch.", QUEUE_BUCKETS, "class"
        )
        usage = ["tenant", "model"]
        self._prompt = Counter("shardgate_prompt_tokens", "Prompt tokens.", usage, registry=r)
        self._completion = Counter(
            "shardgate_completion_tokens", "Generated tokens.", usage, registry=r
        )
        self._cached = Counter(
            "shardgate_cached_prompt_tokens", "Prompt tokens served from cache.", usage, registry=r
        )
        self._cost = Counter("shardgate_cost_usd", "Cost in US dollars.", usage, registry=r)
        self._budget = Gauge(
            "shardgate_tenant_budget_usd", "Monthly budget in US dollars.", ["tenant"], registry=r
        )
        self._rejections = Counter(
            "shardgate_rejections",
            "Requests refused with 429 or 503.",
            ["model", "reason", "code"],
            registry=r,
        )
        self._preemptions = Counter(
            "shardgate_preemptions", "Running requests preempted.", ["model", "class"], registry=r
        )
        self._migrations = Counter(
            "shardgate_migrations", "Streams resumed on another replica.", ["model"], registry=r
        )
        self._retries = Counter(
            "shardgate_retries", "Retries before the first token.", ["model"], registry=r
        )
        self._ejections = Counter(
            "shardgate_ejections", "Outlier ejections.", ["replica"], registry=r
        )
        self._sidecars_seen: set[str] = set()
        self._replicas_seen: set[str] = set()
        self._replica_state = Gauge(
            "shardgate_replica_state",
            "0 down, 1 suspect, 2 up, 3 ejected.",
            ["replica"],
            registry=r,
        )
        self._config_version = Gauge(
            "shardgate_config_version", "Version of the config in force.", registry=r
        )
        self._config_info = Info("shardgate_config", "Hash of the config in force.", registry=r)
        self._reload_failures = Counter(
            "shardgate_config_reload_failures", "Config reloads refused.", registry=r
        )
        self._unanswered = Counter(
            "shardgate_worker_scrape_failures",
            "Sibling workers that did not answer a /metrics scrape in time (--workers).",
            registry=r,
        )
        self._protocol_errors = Counter(
            "shardgate_http_protocol_errors",
            "HTTP connections refused or cut for bad or slow input, by kind.",
            ["kind"],
            registry=r,
        )
        for kind in ProtocolError:
            self._protocol_errors.labels(kind.value)
        self.redis = RedisMetrics(r)
        self.objectives = ObjectiveMetrics(r, self._model, self._tenant)
        self._callbacks = CallbackCollector()
        r.register(self._callbacks)
        self.add_models(models)
        self.set_pricing(pricing or Pricing())

    def _histogram(
        self, name: str, doc: str, buckets: tuple[float, ...], *extra: str
    ) -> LoopHistogram:
        h = LoopHistogram(name, doc, ["model", *extra], buckets)
        self.registry.register(h)
        return h

    # -- closed label sets -----------------------------------------------------------------
    def add_models(self, names: Iterable[str]) -> None:
        """Models that may appear as labels (call on every announcement; never forgets).
        Their failover counters start at 0, so they exist before the first event."""
        for name in names:
            if name not in self._models:
                self._models.add(name)
                self._migrations.labels(name)
                self._retries.labels(name)

    def set_tenants(self, names: Iterable[str]) -> None:
        """The configured tenants (call on every config load); `anonymous` is always known."""
        self._tenants = set(names)
        self._clear_caches()

    def set_pricing(self, pricing: Pricing) -> None:
        """Prices and budgets (call on every config load). Priced models become known."""
        self._pricing = pricing
        self.add_models(pricing.models)
        self._budget.clear()
        for tenant, usd in pricing.budgets().items():
            self._budget.labels(tenant).set(usd)
        self._clear_caches()

    def _clear_caches(self) -> None:
        self._by_model.clear()
        self._usage.clear()
        self._outcomes.clear()
        self._queue.clear()

    def _model(self, model: str) -> str:
        return model if model in self._models else OTHER

    def _tenant(self, tenant: str) -> str:
        known = tenant == ANONYMOUS or tenant in self._tenants or tenant in self._pricing.tenants
        return tenant if known else OTHER

    # -- the hot path ----------------------------------------------------------------------
    def request_done(
        self,
        model: str,
        tenant: str,
        klass: int,
        outcome: Outcome,
        ttft_s: float | None,
        e2e_s: float,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
    ) -> float:
        """One finished request (not a rejected one: see `rejected`); returns its cost in USD."""
        m = self._by_model.get(model) or self._model_children(model)
        if ttft_s is not None:
            m.ttft.observe(ttft_s)
        m.e2e.observe(e2e_s)
        req = self._outcomes.get((model, outcome, klass)) or self._outcome_child(
            model, outcome, klass
        )
        req.inc()
        u = self._usage.get((tenant, model)) or self._usage_children(tenant, model)
        if prompt_tokens:
            u.prompt.inc(prompt_tokens)
        if completion_tokens:
            u.completion.inc(completion_tokens)
        if cached_tokens:
            u.cached.inc(cached_tokens)
        if u.price is None:
            return 0.0
        cost = u.price.cost_usd(prompt_tokens, completion_tokens, cached_tokens)
        if cost:
            u.cost.inc(cost)
        return cost

    def itl(self, model: str, seconds: float) -> None:
        """One inter-token gap."""
        (self._by_model.get(model) or self._model_children(model)).itl.observe(seconds)

    def itl_batch(self, model: str, samples: Iterable[float]) -> None:
        """Several inter-token gaps of one model at once."""
        (self._by_model.get(model) or self._model_children(model)).itl.observe_many(samples)

    def itl_observer(self, model: str) -> Callable[[float], None]:
        """The cheapest form: fetch once per stream, call per token."""
        return (self._by_model.get(model) or self._model_children(model)).itl.observe

    def queue_wait(self, model: str, klass: int, seconds: float) -> None:
        child = self._queue.get((model, klass))
        if child is None:
            m, k = self._model(model), class_label(klass)
            child = self._queue_wait.labels(m, k)
            if m == model and k != OTHER:
                self._queue[(model, klass)] = child
        child.observe(seconds)

    def _model_children(self, model: str) -> _ModelChildren:
        m = self._model(model)
        found = self._by_model.get(m)
        if found is None:
            found = self._by_model[m] = _ModelChildren(
                self._ttft.labels(m), self._itl.labels(m), self._e2e.labels(m)
            )
        return found

    def _outcome_child(self, model: str, outcome: str, klass: int) -> Counter:
        key = (self._model(model), outcome_label(outcome), class_label(klass))
        child = self._requests.labels(*key)
        if key == (model, outcome, str(klass)):
            self._outcomes[(model, outcome, klass)] = child
        return child

    def _usage_children(self, tenant: str, model: str) -> _Usage:
        key = (self._tenant(tenant), self._model(model))
        found = self._usage.get(key)
        if found is None:
            found = self._usage[key] = _Usage(
                self._prompt.labels(*key),
                self._completion.labels(*key),
                self._cached.labels(*key),
                self._cost.labels(*key),
                self._pricing.models.get(key[1]),
            )
        return found

    # -- events ----------------------------------------------------------------------------
    def rejected(self, model: str, reason: RejectReason, klass: int = 0) -> None:
        """A 429/503: counts the rejection and a request with outcome `rejected`."""
        r = reason_of(reason)
        labels = (OTHER, "503") if r is None else (r.value, str(r.status))
        m = self._model(model)
        self._rejections.labels(m, *labels).inc()
        self._requests.labels(m, Outcome.REJECTED, class_label(klass)).inc()

    def preempted(self, model: str, klass: int) -> None:
        self._preemptions.labels(self._model(model), class_label(klass)).inc()

    def migrated(self, model: str) -> None:
        self._migrations.labels(self._model(model)).inc()

    def retried(self, model: str) -> None:
        self._retries.labels(self._model(model)).inc()

    def known_replica(self, replica: str) -> None:
        """Its ejection counter exists (at 0) before the first ejection."""
        self._ejections.labels(replica)
        self._replicas_seen.add(replica)

    def ejected(self, replica: str) -> None:
        """`replica` is a replica's name (a sidecar, or a shard group, from config)."""
        self._ejections.labels(replica).inc()
        self._replicas_seen.add(replica)

    def set_replica_state(self, replica: str, state: ReplicaState) -> None:
        """`replica` here is a sidecar's address."""
        self._replica_state.labels(replica).set(int(state))
        self._sidecars_seen.add(replica)

    def keep_replicas(self, sidecars: Collection[str], replicas: Collection[str]) -> None:
        """Drop the series of sidecars (by address) and replicas (by name) that are gone: a
        reload removed them, and a removed replica must not go on showing as up."""
        for gone in self._sidecars_seen.difference(sidecars):
            self._replica_state.remove(gone)
            self._sidecars_seen.discard(gone)
        for gone in self._replicas_seen.difference(replicas):
            self._ejections.remove(gone)
            self._replicas_seen.discard(gone)

    def set_config(self, version: int, config_hash: str) -> None:
        """The config in force; `config_hash` is a hex digest (at most 64 digits)."""
        if not _HEX.fullmatch(config_hash):
            raise ValueError(f"config hash must be hex, got {config_hash!r}")
        self._config_version.set(version)
        self._config_info.info({"hash": config_hash})

    def reload_failed(self) -> None:
        self._reload_failures.inc()

    def sibling_unanswered(self) -> None:
        self._unanswered.inc()

    def protocol_error(self, kind: ProtocolError) -> None:
        """A request refused by the HTTP edge itself (bad framing, oversized head, timeout)."""
        self._protocol_errors.labels(kind.value).inc()

    # -- read at scrape time ---------------------------------------------------------------
    def register_heartbeat_age(self, callback: Callable[[], Mapping[str, float]]) -> None:
        """`callback()` -> {replica: seconds since its link's last message}; replaces any."""
        self._callbacks.heartbeat_ages = callback

    def render(self) -> tuple[bytes, str]:
        """The /metrics body and its Content-Type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
