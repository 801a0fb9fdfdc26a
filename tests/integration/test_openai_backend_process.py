"""`openai.command`: the sidecar runs the engine server as its child, restarts it when it dies,
logs its output, and stops it with itself. The server is the tests' fake, run as a process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import pytest
from grpc_health.v1 import health_pb2

from engine_sidecar.backends.openai import OpenAIConfig
from engine_sidecar.backends.openai.backend import OpenAIBackend
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from tests.fake_engine_server import MODEL
from tests.integration.poll import until_async
from tests.integration.test_openai_backend_faults import FAST, health
from tests.ports import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _health_is(port: int, want: int, what: str, timeout_s: float = 60.0) -> None:
    """Poll the sidecar's health (a real RPC each time) until it is `want`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen = await health(port)
    while seen != want:
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (health {seen})")
        await asyncio.sleep(0.05)
        seen = await health(port)


async def test_a_dead_engine_server_is_restarted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "engine_sidecar.engine_server")
    port = free_port()
    config = OpenAIConfig(
        base_url=f"http://127.0.0.1:{port}",
        model=MODEL,
        command=[sys.executable, "-m", "tests.fake_engine_server", str(port)],
        restart_backoff_s=0.1,
        **FAST,
    )
    sidecar = Sidecar(SidecarConfig(port=0, backend="openai", openai=config))
    await sidecar.start()
    backend = sidecar.backend
    assert isinstance(backend, OpenAIBackend) and backend.process is not None
    first = backend.process.pid
    assert first is not None
    try:
        await _health_is(sidecar.port, SERVING, "started")
        assert any("listening on" in r.getMessage() for r in caplog.records)  # its output
        os.kill(first, signal.SIGKILL)
        await _health_is(sidecar.port, NOT_SERVING, "the server died")
        await _health_is(sidecar.port, SERVING, "the server was restarted")
        assert backend.process.starts == 2 and backend.process.pid != first
        assert backend.load().ready
        second = backend.process.pid
    finally:
        await sidecar.stop(0.1)
    assert second is not None
    await until_async(lambda: _gone(second), 10.0, "the server stopped with the sidecar")
