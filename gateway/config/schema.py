"""The gateway's configuration schema (msgspec-typed YAML; errors name the bad field)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.collector import CollectorSettings
from gateway.config.discovery import DiscoverySettings
from gateway.config.pricing import Pricing
from gateway.config.routing import HealthSettings, RetrySettings, RoutingSettings
from gateway.config.store import AdminConfig, StoreConfig
from gateway.config.tenants import (
    RateLimits,
    SchedulingConfig,
    TenantConfig,
    UnknownFieldsMode,
    check_tenancy,
)
from gateway.shared_limits.target import parse_target

Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
# The routes whose streams a config may keep for resume (gateway/streams/ask.py).
ResumableRoute = Literal["/v1/chat/completions", "/v1/completions", "shardgate.v1.Gateway/Generate"]
# The routes a config may open to callers without a key (gateway/api/keys.py): the listings of
# models, which serve no tenant. (A route that does is opened with an `anonymous:` tenant.)
PublicRoute = Literal["/v1/models", "/v1/models/{model}", "shardgate.v1.Gateway/ListModels"]


class Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class EdgeTls(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """TLS served on a public port; the files are read again when they change."""

    cert_file: str
    key_file: str


class Listen(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    host: str = "127.0.0.1"
    port: Port
    # Absent: plaintext (TLS ends at an ingress in front of the gateway).
    tls: EdgeTls | None = None


class LinkTls(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Mutual TLS to the sidecars: the gateway's client certificate, and the CA that sidecars'
    certificates must be signed by. New links read the files again when they changed."""

    cert_file: str
    key_file: str
    ca_file: str
    # The name sidecars' certificates are checked against (default: the host of each address).
    server_name: str | None = None


class LinkSettings(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # auto: the sidecar's TCP link when its Info announces one, else the gRPC Link stream.
    transport: Literal["auto", "grpc"] = "auto"
    connect_timeout_s: Seconds = 5.0
    # No message (deltas or heartbeat) for this long: the link is dead and reconnects.
    heartbeat_timeout_s: Seconds = 3.0
    reconnect_min_s: Seconds = 0.1
    reconnect_max_s: Seconds = 5.0
    # Submits/aborts waiting for the link writer before new requests are refused.
    max_outgoing: Annotated[int, msgspec.Meta(gt=0)] = 100_000
    # Absent: plaintext links (sidecars with `tls` refuse them).
    tls: LinkTls | None = None


class ResponsesSettings(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The Responses API's store (per process): stored responses. The events of background
    ones (for `GET /v1/responses/{id}?stream=true&starting_after=N`) are kept in the stream
    store, under `streams`' bounds and retention."""

    # A finished response stays retrievable (and usable as a previous_response_id) this long.
    retention_s: Seconds = 600.0
    # Responses kept at once, and their bytes (output, conversation): finished ones are
    # evicted first, oldest first; when only running ones fill it, a background request is
    # refused (503) and a stored one is answered without being kept.
    max_responses: Annotated[int, msgspec.Meta(gt=0)] = 1024
    max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 64 << 20


class StreamSettings(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The stream store: streamed responses' events kept so that a client can reattach
    (GET /v1/streams/{id}, gRPC Resume, the Responses API's background responses). When it is
    full, new streams are served without resume (`x-shardgate-stream-resume: unavailable`) and
    a background response is refused (503)."""

    enabled: bool = True
    # Per process: streams kept (live and finished) and bytes of their events.
    max_streams: Annotated[int, msgspec.Meta(gt=0)] = 10_000
    max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 256 << 20
    # Per stream: its newest events kept (a reader cannot start before the oldest kept), at
    # most 1 GiB of them (a stream's buffer numbers its bytes in 32 bits: streams/compact.py).
    max_stream_events: Annotated[int, msgspec.Meta(gt=0)] = 65_536
    max_stream_bytes: Annotated[int, msgspec.Meta(gt=0, le=1 << 30)] = 4 << 20
    # A finished stream is kept this long for a client to fetch its end.
    retention_s: Seconds = 300.0


class GatewaySettings(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    http: Listen = Listen(port=8080)
    grpc: Listen = Listen(port=50051)
    max_body_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 << 20
    # HTTP request heads: the longest request line and header field (name and value), and the
    # most header fields; a request over any of them gets 431.
    max_request_line_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8190
    max_header_field_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8190
    max_headers: Annotated[int, msgspec.Meta(gt=0)] = 128
    # A request's whole head must arrive within this long (from the connection's start, or
    # from the first byte of a later request on it): else 408 and the connection is closed.
    client_header_timeout_s: Seconds = 10.0
    # The longest gap between two reads of a request body: else 408 and the connection is closed.
    client_body_timeout_s: Seconds = 10.0
    # Idle keep-alive HTTP connections are closed after this long.
    keepalive_timeout_s: Seconds = 75.0
    default_max_tokens: Annotated[int, msgspec.Meta(gt=0)] = 256
    # A request body's fields that its API (chat completions, completions, responses,
    # messages) declares none for: "warn" accepts and ignores them, as `vllm serve` does,
    # naming them in a log line and the response's `x-shardgate-ignored-fields` header;
    # "reject" answers 400 naming them, as OpenAI and Anthropic do. A tenant's
    # `unknown_fields` overrides it. Reloads.
    unknown_fields: UnknownFieldsMode = "warn"
    # Whole-request deadline and the wait for a request's first engine output.
    request_timeout_s: Seconds = 600.0
    first_token_timeout_s: Seconds = 60.0
    # Deltas a slow client may have pending before they are merged into one.
    max_pending_deltas: Annotated[int, msgspec.Meta(gt=0)] = 1024
    # Token frames go from the link reader straight to the client's socket while it keeps up
    # (false: every frame through the request's own task).
    direct_writes: bool = True
    # SSE comments sent to streaming clients while their request waits in a queue.
    keepalive_s: Seconds = 5.0
    # On SIGTERM: in-flight requests get this long to finish; sidecars removed by a reload
    # get this long before their remaining requests migrate.
    drain_timeout_s: Seconds = 30.0
    # Bearer key of /admin/* (reload, config); unset: admin calls only from loopback.
    admin_key: str | None = None
    # The longest wait for a LoRA adapter to load on (or unload from) the replicas of its model
    # (/v1/load_lora_adapter, /v1/unload_lora_adapter), their announcement of it included.
    lora_admin_timeout_s: Seconds = 120.0
    # Watch the config file and reload it when it changes (also on SIGHUP and /admin/reload).
    watch_config: bool = True
    # One JSON log line per finished request.
    request_log: bool = True
    # Logs as JSON lines (false: plain text); `--log-format` of `shardgate up` and `shardgate
    # gateway` overrides it, and `up` passes the format on to the sidecars it starts.
    json_logs: bool = True
    link: LinkSettings = LinkSettings()
    responses: ResponsesSettings = ResponsesSettings()
    # A streaming client that disconnects: its engine request keeps running this long for it
    # (or another reader of the same tenant) to reattach; then it is aborted. 0: aborted at once.
    detach_grace_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    # The routes whose streams are kept for resume without being asked (its `id:` lines and
    # the stream store): "/v1/chat/completions", "/v1/completions",
    # "shardgate.v1.Gateway/Generate". A request asks for itself (`x-shardgate-resumable`,
    # `stream_options.resumable`), a tenant in its `resumable_streams`. Empty (default): a
    # stream nobody asked to keep is byte for byte what `vllm serve` sends.
    resumable_streams: frozenset[ResumableRoute] = frozenset()
    # With tenants configured, every /v1 route (as with `vllm serve --api-key`) and every call
    # of the gRPC service shardgate.v1.Gateway needs a tenant's key (or an `anonymous:`
    # tenant); /v1/load_lora_adapter and /v1/unload_lora_adapter need the admin key instead;
    # /health, /healthz, /readyz, /metrics and gRPC health and reflection need none. Nor do
    # the routes listed here, of "/v1/models", "/v1/models/{model}" and
    # "shardgate.v1.Gateway/ListModels" (no others). Empty (default): none. Reloads.
    public_routes: frozenset[PublicRoute] = frozenset()
    streams: StreamSettings = StreamSettings()
    gc: CollectorSettings = CollectorSettings()
    # glibc's mmap threshold, fixed at start (gateway/allocator.py): blocks this large or larger
    # are mappings of their own, given back when freed, so that tables rebuilt under churn do
    # not pile up on the heap; 1 MiB keeps the link's reads (up to 256,000 bytes) on the heap,
    # where they are cheaper than a mapping each. null: glibc's own moving threshold. Read at
    # start only; it is the whole process's, and glibc cannot go back to its moving threshold
    # once it is set.
    malloc_mmap_threshold_bytes: Annotated[int, msgspec.Meta(ge=4096, le=32 << 20)] | None = 1 << 20
    # The streaming routes (POST /v1/chat/completions, /v1/completions) served by a lean
    # HTTP/1.1 parser (llhttp) in front of aiohttp on the same port; every other request, and
    # any the lean path does not take whole, goes to aiohttp. Not with TLS on the edge.
    # False: aiohttp serves everything.
    lean_http: bool = True


class SidecarEndpoint(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    address: str
    # What `shardgate up` starts for this endpoint: a sidecar config (see engine_sidecar.config),
    # its host and port taken from `address`. Absent: the sidecar runs elsewhere.
    launch: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"address {self.address!r} must be host:port")


class RedisConfig(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Tenants' and model pools' limits shared by every worker and instance (see docs/scale-out.md:
    Shared limits). redis:// or rediss:// (one server), redis+sentinel://host:port[,host:port]/
    <service>[/db] (Sentinel), redis+cluster://host:port[,host:port] (Cluster)."""

    url: str = "redis://127.0.0.1:6379/0"
    # Every key starts with it: several gateways' fleets can share one Redis.
    key_prefix: str = "shardgate"
    # One Redis call's deadline; past it the request is admitted by the local fallback.
    timeout_ms: Annotated[int, msgspec.Meta(gt=0, le=10_000)] = 50

    def __post_init__(self) -> None:
        scheme = self.url.partition("://")[0]
        if scheme not in REDIS_SCHEMES:
            raise ValueError(f"redis.url: scheme {scheme!r} is not one of {sorted(REDIS_SCHEMES)}")
        parse_target(self.url)
        if not self.key_prefix or any(c in self.key_prefix for c in "{} "):
            raise ValueError("redis.key_prefix must be non-empty, without spaces or braces")


REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+sentinel", "redis+cluster"})


class Config(Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    gateway: GatewaySettings = GatewaySettings()
    sidecars: list[SidecarEndpoint] = []
    # How the sidecars are found: `static` (the list above), `dns` or `kubernetes`.
    discovery: DiscoverySettings = DiscoverySettings()
    # Tenants by API key; with none, everyone is the unlimited anonymous tenant.
    tenants: list[TenantConfig] = []
    # The tenant of requests without a key (absent: such requests get 401 when tenants exist).
    anonymous: str | None = None
    scheduling: SchedulingConfig = SchedulingConfig()
    # Shared limits of a model pool, over all tenants together.
    model_limits: dict[str, RateLimits] = {}
    # Running requests per model pool at most (default: the sum of its replicas' slots).
    model_capacity: dict[str, Annotated[int, msgspec.Meta(gt=0)]] = {}
    # Prices per 1k tokens (cost metrics) and tenants' monthly budgets (cost alerts).
    pricing: Pricing = Pricing()
    # Models the fleet serves, for checking the names below (sim sidecars in `launch`
    # sections and priced models count as declared).
    models: list[str] = []
    # Degradation: a model with no healthy replica, or a full queue, is served by its fallback
    # (responses name the model that served them).
    fallbacks: dict[str, str] = {}
    # Filters -> weighted scorers -> picker; heartbeats and outlier ejection; retry budget.
    routing: RoutingSettings = RoutingSettings()
    health: HealthSettings = HealthSettings()
    retry: RetrySettings = RetrySettings()
    # Limits shared in Redis (absent: each process keeps its own buckets).
    redis: RedisConfig | None = None
    # Keys, teams and the spend ledger (gateway/store/); the management API's master key.
    store: StoreConfig | None = None
    admin: AdminConfig | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.sidecars]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate sidecar names: {sorted(dup)}")
        if self.discovery.mode != "static" and self.sidecars:
            raise ValueError(f"sidecars: listed, but discovery mode is {self.discovery.mode}")
        check_tenancy(self.tenants, self.anonymous)
        self._check_models()

    def store_config(self) -> StoreConfig | None:
        """The store in force: the configured one, the default one under `admin:`, or none."""
        if self.store is None and self.admin is not None:
            return StoreConfig()
        return self.store

    def declared_models(self) -> set[str]:
        known = set(self.models) | set(self.pricing.models)
        for e in self.sidecars:
            launch = e.launch or {}
            if launch.get("backend", "sim") == "sim":
                sim = launch.get("sim") or {}
                known.add(str(sim.get("model", "sim-llama")) if isinstance(sim, dict) else "")
        return known

    def _check_models(self) -> None:
        named = [("fallbacks", m) for pair in self.fallbacks.items() for m in pair]
        named += [("model_capacity", m) for m in self.model_capacity]
        named += [("model_limits", m) for m in self.model_limits]
        if not named:
            return
        known = self.declared_models()
        for section, model in named:
            if model not in known:
                raise ValueError(f"{section}: unknown model {model!r} (declare it under `models:`)")
        for model in self.fallbacks:
            seen = {model}
            nxt = self.fallbacks.get(model)
            while nxt is not None:
                if nxt in seen:
                    raise ValueError(f"fallbacks: {model!r} falls back in a cycle")
                seen.add(nxt)
                nxt = self.fallbacks.get(nxt)
