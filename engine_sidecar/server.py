"""Runs one sidecar: the backend, the Engine service, health, and a graceful stop."""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from shardgate.v1 import engine_pb2_grpc as pb_grpc

from engine_sidecar.backend import Backend
from engine_sidecar.backends.sim import SimBackend
from engine_sidecar.config import SidecarConfig
from engine_sidecar.hub import Hub
from engine_sidecar.metrics import SidecarMetrics
from engine_sidecar.servicer import EngineServicer, kv_mirror
from engine_sidecar.tcp_link import TcpLinkServer
from gateway import collector, tasks
from gateway.tls import TlsFiles

log = logging.getLogger(__name__)

SERVICE_NAME = "shardgate.engine.v1.Engine"


def make_backend(config: SidecarConfig) -> Backend:
    # Real engines are imported only when asked for: the sim sidecar needs neither.
    if config.backend == "sim":
        return SimBackend(config.sim)
    if config.backend == "vllm" and config.vllm is not None:
        if config.rank > 0:
            from engine_sidecar.backends.vllm.headless import HeadlessWorkers

            return HeadlessWorkers(config.vllm, rank=config.rank, world_size=config.world_size)
        from engine_sidecar.backends.vllm.backend import VllmBackend

        return VllmBackend(
            config.vllm, rank=config.rank, world_size=config.world_size, sidecar=config.name
        )
    if config.backend == "triton" and config.triton is not None:
        from engine_sidecar.backends.triton.backend import TritonBackend

        return TritonBackend(config.triton)
    if config.backend == "openai" and config.openai is not None:
        from engine_sidecar.backends.openai.backend import OpenAIBackend

        return OpenAIBackend(config.openai, sidecar=config.name)
    raise ValueError(f"unknown backend {config.backend!r}")


def tls_files(config: SidecarConfig) -> TlsFiles | None:
    """Every port (gRPC, TCP link, metrics) takes only clients whose certificate the CA signed."""
    t = config.tls
    if t is None:
        return None
    return TlsFiles("sidecar tls", t.cert_file, t.key_file, t.client_ca_file, server=True)


class Sidecar:
    """A started sidecar; `port` is the bound port (useful with port 0)."""

    def __init__(self, config: SidecarConfig, backend: Backend | None = None) -> None:
        self.config = config
        self.backend = backend or make_backend(config)
        self.hub = Hub(self.backend)
        self.servicer = EngineServicer(config, self.backend, self.hub)
        self.health = health.aio.HealthServicer()
        self.server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)]
        )
        self.tls = tls_files(config)
        self._front = self.tls.front_context() if self.tls is not None else None
        self.tcp_link = TcpLinkServer(
            self.servicer.link_session, config.link_write_timeout_s, ssl=self._front
        )
        self.port = 0
        self.link_port = 0
        self.metrics_port = 0
        self._metrics: SidecarMetrics | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        pb_grpc.add_EngineServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"{self.config.host}:{self.config.port}"
        if self.tls is not None:
            self.port = self.server.add_secure_port(address, self.tls.server_credentials())
        else:
            self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot bind {self.config.host}:{self.config.port}")
        if self.config.link_port >= 0:
            self.link_port = await self.tcp_link.start(self.config.host, self.config.link_port)
            self.servicer.link_port = self.link_port
        await self.backend.start(self.hub.sink)
        await self.server.start()
        if self.config.metrics_port is not None:
            self._metrics = SidecarMetrics(
                self.backend.load,
                self.backend.info().models[0].name,
                links=lambda: self.servicer.links + self.tcp_link.open,
                inflight=lambda: self.hub.inflight,
                kv=lambda: kv_mirror(self.backend),
            )
            self.metrics_port = await self._metrics.start(
                self.config.host, self.config.metrics_port, self._front
            )
        await self._set_serving(True)
        self._watch = asyncio.create_task(self._watch_engine())
        log.info(
            "sidecar %s serving on %s:%d (tcp link: %s, %s)",
            self.config.name,
            self.config.host,
            self.port,
            self.link_port or "off",
            "mutual TLS" if self.tls is not None else "plaintext",
        )

    async def _set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def _watch_engine(self) -> None:
        """An engine that dies turns the sidecar NOT_SERVING at once; one that comes back (an
        engine server restarted) SERVING again, unless the sidecar drains."""
        serving = True
        while True:
            healthy = self.backend.healthy()
            if healthy != serving and not self.hub.draining:
                serving = healthy
                if healthy:
                    log.info("engine is healthy again")
                else:
                    log.error("engine is no longer healthy")
                await self._set_serving(serving)
            await asyncio.sleep(0.1)

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: refuse new work, let in-flight requests finish within the grace, then stop."""
        grace = self.config.drain_grace_s if grace_s is None else grace_s
        self.hub.draining = True
        await self._set_serving(False)
        for _ in range(max(1, round(grace / 0.05))):
            if not self.hub.inflight:
                break
            await asyncio.sleep(0.05)
        await tasks.stop(self._watch)
        await self.backend.stop()
        await self.tcp_link.stop()
        await self.server.stop(1.0)
        if self._metrics is not None:
            await self._metrics.stop()


async def serve(config: SidecarConfig, stop: asyncio.Event) -> None:
    """The sidecar process (its collector settings are the process's: not set by a Sidecar
    embedded in another)."""
    collector.set_thresholds(config.gc)
    sidecar = Sidecar(config)
    await sidecar.start()
    collector.after_start(config.gc)
    try:
        await stop.wait()
    finally:
        await sidecar.stop()
        collector.after_stop(config.gc)
