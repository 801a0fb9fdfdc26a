"""What a link logs: a sidecar still starting (its engine loading, nothing serving its port yet)
is expected, and said at INFO with what the link waits for; a link that was up and is lost is a
WARNING; the gateway's own stop is not a fault."""

from __future__ import annotations

import logging

import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.config.schema import LinkSettings
from gateway.upstream.link import EngineLink
from tests.integration.poll import until_async
from tests.ports import free_port

LINK_LOGGER = "gateway.upstream.link"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LINK_LOGGER and r.levelno == level]


async def test_a_sidecar_still_starting_is_info_then_its_loss_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LINK_LOGGER)
    port = free_port()
    settings = LinkSettings(connect_timeout_s=0.5, reconnect_min_s=0.05, reconnect_max_s=0.1)
    link = EngineLink("sim-a", f"127.0.0.1:{port}", settings)
    link.start()
    sidecar: Sidecar | None = None
    try:
        # Nothing serves the port yet: the link tries again and again, at INFO.
        await until_async(lambda: len(records(caplog, logging.INFO)) >= 2, 30.0, "retries")
        waiting = records(caplog, logging.INFO)[0]
        assert waiting.startswith(f"link sim-a: waiting for sidecar at 127.0.0.1:{port} to serve")
        assert "engine may still be loading" in waiting
        assert records(caplog, logging.WARNING) == []
        config = SidecarConfig(name="sim-a", port=port, backend="sim", sim=SimConfig())
        sidecar = Sidecar(config)
        await sidecar.start()
        assert await link.wait_connected(30.0)
        await sidecar.stop(1.0)  # a link that was up, lost: a fault
        sidecar = None
        await until_async(lambda: records(caplog, logging.WARNING) != [], 30.0, "its loss")
        assert any("down" in m for m in records(caplog, logging.WARNING))
    finally:
        caplog.clear()
        await link.close()
        if sidecar is not None:
            await sidecar.stop(1.0)


async def test_the_gateway_s_own_stop_is_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LINK_LOGGER)
    config = SidecarConfig(name="sim-b", port=0, backend="sim", sim=SimConfig())
    sidecar = Sidecar(config)
    await sidecar.start()
    link = EngineLink("sim-b", f"127.0.0.1:{sidecar.port}", LinkSettings())
    link.start()
    try:
        assert await link.wait_connected(30.0)
        await link.close()
        assert "link sim-b down: gateway is shutting down" in records(caplog, logging.INFO)
        assert records(caplog, logging.WARNING) == []
    finally:
        await sidecar.stop(1.0)
