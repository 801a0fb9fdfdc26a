"""The composition root: the only place that wires concrete objects together."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from shardgate.v1 import gateway_pb2_grpc

from gateway import allocator, collector
from gateway.api import grpc_api
from gateway.api.forward import Forwarder
from gateway.api.grpc_forward import ResumeOwner
from gateway.api.http import HttpApi
from gateway.api.http_server import RESTART_ONLY_HTTP, Edge, EdgeRunner
from gateway.api.lean.front import LeanFront
from gateway.api.lean.routes import lean_front
from gateway.config.discovery import DiscoverySettings
from gateway.config.reload import Reloader, config_hash, restart_only_change
from gateway.config.schema import Config, EdgeTls, SidecarEndpoint
from gateway.discovery.dns import DnsSource, Resolver, getaddrinfo
from gateway.discovery.kubernetes import KubernetesSource
from gateway.discovery.runner import Discovery, Source
from gateway.discovery.srv import srv_resolver
from gateway.observability.callbacks import heartbeat_ages
from gateway.observability.discovery import DiscoveryCollector
from gateway.observability.gc_pauses import GcPauses
from gateway.observability.kv_metrics import KvCollector
from gateway.observability.ledger_metrics import LedgerCollector
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.report import RequestReporter
from gateway.observability.siblings import Siblings
from gateway.observability.stream_metrics import StreamMetrics
from gateway.policy.routing.router import Router
from gateway.policy.tenants import Tenants, kept_tenants
from gateway.runtime.admitter import Admitter, LocalAdmission
from gateway.runtime.events import EventQueue
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.keyring import Keyring
from gateway.runtime.scheduler import Scheduler
from gateway.runtime.service import Service
from gateway.runtime.supervisor import Supervisor
from gateway.shared_limits.admission import SharedAdmission
from gateway.store.sql import open_store
from gateway.streams import owner
from gateway.streams.hub import Streams
from gateway.tls import TlsFiles
from gateway.upstream import credentials
from gateway.workers import Seat, share

log = logging.getLogger(__name__)


def validate_static(config: Config) -> None:
    """Checks beyond the schema that need components built (routing plugins' parameters)."""
    Router(config.routing, None)


def edge_tls(what: str, tls: EdgeTls | None) -> TlsFiles | None:
    return None if tls is None else TlsFiles(what, tls.cert_file, tls.key_file, server=True)


def check_link_tls(config: Config) -> None:
    """The link's certificate files load (ValueError naming `gateway.link.tls` if not)."""
    if config.gateway.link.tls is not None:
        credentials.files(config.gateway.link.tls)


def discovery_source(d: DiscoverySettings, resolver: Resolver | None = None) -> Source | None:
    """What finds the sidecars at run time (None: the config's list). `resolver`: DNS
    discovery's (default: getaddrinfo, or the system's DNS servers for SRV names)."""
    if d.mode == "dns" and d.dns is not None:
        if resolver is None:
            resolver = srv_resolver() if d.dns.srv else getaddrinfo
        return DnsSource(d.dns, resolver)
    if d.mode == "kubernetes" and d.kubernetes is not None:
        return KubernetesSource(d.kubernetes)
    return None


class Gateway:
    """A running gateway. Ports of None take the config's; 0 picks a free port."""

    def __init__(
        self,
        config: Config,
        http_port: int | None = None,
        grpc_port: int | None = None,
        config_path: str | Path | None = None,
        worker_of: int = 1,
        seat: Seat | None = None,
        resolver: Resolver | None = None,
        port_offset: int = 0,
    ) -> None:
        """`worker_of` > 1: one of that many workers sharing the ports (gateway/workers.py);
        the config given is already this worker's share. `seat`: where it finds its siblings
        (for /metrics and reloads of all). `resolver`: DNS discovery's. `port_offset`: what
        the config's ports were moved by, and a reloaded file's are (gateway/config/offset.py)."""
        s = config.gateway
        self.worker_of = worker_of
        self.config = config
        check_link_tls(config)
        self._http_tls = edge_tls("gateway.http.tls", s.http.tls)
        self._grpc_tls = edge_tls("gateway.grpc.tls", s.grpc.tls)
        self.draining = False
        self.metrics = GatewayMetrics(
            config.pricing,
            tenants=[t.name for t in config.tenants],
            models=config.pricing.models,
        )
        self.reporter = RequestReporter(self.metrics, s.request_log)
        self.gc_pauses = GcPauses()
        self.metrics.registry.register(self.gc_pauses)
        self.events = EventQueue()
        self.fleet = Fleet(config.sidecars, s.link, config.health, self.events)
        self.discovery: Discovery | None = None
        source = discovery_source(config.discovery, resolver)
        if source is not None:
            self.discovery = Discovery(source, self._discovered)
            self.metrics.registry.register(DiscoveryCollector(self.discovery))
        self.supervisor = Supervisor(self.fleet, config.routing, config.retry, config.health)
        self.supervisor.on_ejected = self.metrics.ejected
        self.fleet.on_stalled = self.supervisor.stalled
        self.scheduler = Scheduler(
            self.fleet,
            self.supervisor,
            config.scheduling,
            config.model_capacity,
            self.events,
            keepalive_s=s.keepalive_s,
            on_done=self._settle,
            capacity_share=worker_of,
        )
        self.keyring: Keyring | None = None
        store = config.store_config()
        if store is not None:
            self.keyring = Keyring(open_store(store.url), store)
            self.keyring.on_change = self._tenant_labels
            self.metrics.registry.register(LedgerCollector(self.keyring.ledger))
        self.service = Service(
            self.fleet,
            self.scheduler,
            Tenants(config.tenants, config.anonymous, self.keyring),
            self._admitter(config),
            s.max_pending_deltas,
            self.metrics,
        )
        self.service.fallbacks = dict(config.fallbacks)
        self.service.keyring, self.service.pricing = self.keyring, config.pricing
        self.scheduler.on_queue_wait = self.reporter.queue_wait
        self.fleet.on_change = self.scheduler.capacity_changed
        self.metrics.register_heartbeat_age(lambda: heartbeat_ages(self.fleet.links))
        self.metrics.registry.register(KvCollector(self.fleet.kv.caches))
        self.reloader: Reloader | None = None
        if config_path is not None:
            self.reloader = Reloader(
                config_path,
                Path(config_path).read_text(),
                self.apply,
                on_failure=self.metrics.reload_failed,
                validate=self.validate,
                port_offset=port_offset,
            )
        digest = config_hash(config) if self.reloader is None else self.reloader.status.hash
        self.metrics.set_config(1, digest)
        tag = owner.tag(None if seat is None else seat.index)
        self.streams = Streams(s, StreamMetrics(self.metrics.registry), tag)
        self.streams.tenant_keeps = lambda name: self.service.tenants.resumable(name)
        self.http_api = HttpApi(self.fleet, self.service, self.metrics, s, self, self.streams)
        self.grpc_servicer = grpc_api.GatewayServicer(self.fleet, self.service, s, self.streams)
        self.siblings: Siblings | None = None
        self.forwarder: Forwarder | None = None
        if seat is not None:
            self._seat(seat)
        self._http_port = s.http.port if http_port is None else http_port
        self._grpc_port = s.grpc.port if grpc_port is None else grpc_port
        self._runner: EdgeRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self.http_port = 0
        self.grpc_port = 0

    def _seat(self, seat: Seat) -> None:
        """One of `--workers N`: its siblings' metrics, reloads of all, and what a sibling
        keeps (a stream, a response) reached through it."""
        sockets = {i: seat.socket(i) for i in seat.siblings()}
        self.forwarder = Forwarder(
            owner.Owners(seat.index, seat.of), sockets, lambda: self.config.gateway.keepalive_s
        )
        self.http_api.forwarder = self.grpc_servicer.forwarder = self.forwarder
        resumes = ResumeOwner(
            self.streams, lambda: self.service.tenants, lambda: self.config.gateway.keepalive_s
        )
        self.siblings = Siblings(
            seat.socket(seat.index),
            sockets,
            self.http_api.own_metrics,
            self.metrics.sibling_unanswered,
            app=self.http_api.sibling_app(resumes.handle),
        )
        if self.reloader is not None:
            self.reloader.fan_out = seat.reload_all

    def _admitter(self, config: Config) -> Admitter:
        if config.redis is None:
            return LocalAdmission(config.model_limits)
        return SharedAdmission(
            config.redis, config.model_limits, self.metrics.redis, workers=self.worker_of
        )

    # -- hot reload ------------------------------------------------------------------------
    def validate(self, new: Config) -> None:
        """What a running gateway cannot take without a restart, and what only building shows."""
        validate_static(new)
        check_link_tls(new)
        changed = restart_only_change(self.config, new, RESTART_ONLY_HTTP)
        if changed is not None:
            raise ValueError(f"{changed} changes only with a restart")

    def _sidecars(self, config: Config) -> list[SidecarEndpoint]:
        """The sidecar set: the config's, or the discovered one."""
        return config.sidecars if self.discovery is None else self.discovery.endpoints()

    def _discovered(self, endpoints: list[SidecarEndpoint]) -> None:
        """Discovery changed the set: the fleet takes it as it takes a reload's."""
        c = self.config
        self.fleet.update(endpoints, c.gateway.link, c.health, c.gateway.drain_timeout_s)

    def apply(self, new: Config, version: int, digest: str) -> None:
        """Swap in a validated config, as read from the file: a worker applies its share.
        Live state survives: token-bucket levels of tenants whose limits did not change, queues,
        in-flight streams, connected sidecars."""
        new = share(new, self.worker_of)
        s = new.gateway
        tenants = Tenants(new.tenants, new.anonymous, self.keyring)
        self.supervisor.reconfigure(new.routing, new.retry, new.health)  # may raise: first
        kept = kept_tenants(self.config.tenants, new.tenants)
        self.service.admission.reconfigure(new.model_limits, kept)
        self.service.tenants = tenants
        self.service.pricing = new.pricing
        self.service.max_pending = s.max_pending_deltas
        self.service.fallbacks = dict(new.fallbacks)
        self.scheduler.reconfigure(new.scheduling, new.model_capacity)
        self.scheduler.keepalive_s = s.keepalive_s
        self.fleet.update(self._sidecars(new), s.link, new.health, s.drain_timeout_s)
        self.http_api.settings = self.http_api.serving.settings = s
        self.http_api.anthropic.settings = s
        self.http_api.tokenizing.settings = s
        self.http_api.responses.reconfigure(s)
        self.streams.grace_s = s.detach_grace_s  # (n > 1 streams read it there)
        self.streams.routes = s.resumable_streams
        self.grpc_servicer.settings = s
        self.reporter.log_requests = s.request_log
        collector.set_thresholds(s.gc)
        self.metrics.set_pricing(new.pricing)
        self.metrics.set_config(version, digest)
        self.config = new
        self._tenant_labels()

    def _tenant_labels(self) -> None:
        """The tenants the metrics name: the config's and the store's teams."""
        teams = self.keyring.tenants() if self.keyring is not None else ()
        self.metrics.set_tenants([*(t.name for t in self.config.tenants), *teams])

    def _settle(self, job: Job) -> None:
        self.service.settle(job)
        self.reporter.done(job)

    def _lean_front(self, edge: Edge) -> LeanFront | None:
        worker = self.forwarder.index if self.forwarder is not None else None
        tls, settings = self._http_tls is not None, lambda: self.http_api.settings
        return lean_front(self.config.gateway, tls, edge, self.http_api.serving, settings, worker)

    async def start(self) -> None:
        s = self.config.gateway
        self.gc_pauses.install()
        collector.set_thresholds(s.gc)
        await self.service.admission.start()
        if self.keyring is not None:
            await self.keyring.start()
        self.fleet.start()
        if self.discovery is not None:
            self.discovery.start()
        self.scheduler.start()
        if self.siblings is not None:
            await self.siblings.start()
        edge = Edge(s.client_header_timeout_s, self.metrics.protocol_error)
        self._runner = EdgeRunner(
            self.http_api.app(),
            edge,
            self._lean_front(edge),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=s.drain_timeout_s,
            keepalive_timeout=s.keepalive_timeout_s,
            max_line_size=s.max_request_line_bytes,
            max_field_size=s.max_header_field_bytes,
            max_headers=s.max_headers,
        )
        await self._runner.setup()
        reuse = self.worker_of > 1
        site = web.TCPSite(
            self._runner,
            s.http.host,
            self._http_port,
            backlog=1024,
            reuse_port=reuse or None,
            ssl_context=self._http_tls.front_context() if self._http_tls is not None else None,
        )
        await site.start()
        self.http_port = self._runner.addresses[0][1]

        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", s.max_body_bytes),
                ("grpc.so_reuseport", 1 if reuse else 0),
            ]
        )
        gateway_pb2_grpc.add_GatewayServicer_to_server(self.grpc_servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (
                grpc_api.SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        address = f"{s.grpc.host}:{self._grpc_port}"
        if self._grpc_tls is not None:
            self.grpc_port = server.add_secure_port(address, self._grpc_tls.server_credentials())
        else:
            self.grpc_port = server.add_insecure_port(address)
        if self.grpc_port == 0:
            raise OSError(f"cannot bind {s.grpc.host}:{self._grpc_port}")
        await server.start()
        self._grpc = server
        for name in ("", grpc_api.SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.reloader is not None and s.watch_config:
            self.reloader.watch()
        collector.after_start(s.gc)
        allocator.fix_mmap_threshold(s.malloc_mmap_threshold_bytes)
        log.info(
            "gateway: http %s:%d grpc %s:%d",
            s.http.host,
            self.http_port,
            s.grpc.host,
            self.grpc_port,
        )

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful: stop accepting, let in-flight streams finish within the grace, then exit."""
        grace = self.config.gateway.drain_timeout_s if grace_s is None else grace_s
        self.draining = True
        if self.reloader is not None:
            await self.reloader.close()
        if self.discovery is not None:
            await self.discovery.close()  # the set stays as it is while in-flight ones finish
        await self._health.enter_graceful_shutdown()
        stops = []
        if self._grpc is not None:
            stops.append(self._grpc.stop(grace))
        if self._runner is not None:
            self._runner._shutdown_timeout = grace  # read by cleanup(); settable per stop
            stops.append(self._runner.cleanup())
        await asyncio.gather(*stops)
        await self.http_api.responses.close()  # background responses: their requests abort
        await self.streams.detached.close()  # streams whose clients left: their requests end
        if self.siblings is not None:
            await self.siblings.stop()
        if self.forwarder is not None:
            await self.forwarder.close()
        await self.scheduler.close()
        await self.fleet.close()
        await self.service.admission.close()
        if self.keyring is not None:
            await self.keyring.close()  # (after the scheduler: every ended request's row)
        self.gc_pauses.uninstall()
        collector.after_stop(self.config.gateway.gc)
