"""A gateway in front of one sidecar of the session's shared vLLM engine, on the test's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec

from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from tests.engines import require, vllm_config
from tests.integration.poll import until_async

MODEL = "tiny-llama"


class VllmCluster:
    def __init__(self, sidecar: Sidecar, gateway: Gateway) -> None:
        self.sidecar = sidecar
        self.gateway = gateway

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.http_port}/v1"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.gateway.grpc_port}"

    @property
    def sidecar_target(self) -> str:
        return f"127.0.0.1:{self.sidecar.port}"

    async def routable(self) -> None:
        """Wait until the replica is routable (a machine busy elsewhere may have delayed its
        heartbeats past the gateway's patience)."""
        await until_async(
            lambda: self.gateway.fleet.models().get(MODEL, (0, 0))[1] > 0, 120.0, "routable"
        )


@asynccontextmanager
async def vllm_cluster(
    tiny_model_dir: Path,
    engine: Any,
    settings_yaml: str = "",
    sidecar_vllm: dict[str, Any] | None = None,
) -> AsyncIterator[VllmCluster]:
    """`settings_yaml`: the gateway's settings, indented under `gateway:`. The link's heartbeat
    patience is long: the engine's output handler shares this loop with the sidecar, and a
    busy machine can delay a heartbeat past the default's 3 s (these tests are not about it)."""
    require("vllm")
    from engine_sidecar.backends.vllm.backend import VllmBackend

    vllm = vllm_config(tiny_model_dir)
    if sidecar_vllm:  # the sidecar's own settings over the shared engine's (trust, parsers)
        vllm = msgspec.structs.replace(vllm, **sidecar_vllm)
    config = SidecarConfig(name="vllm-0", port=0, backend="vllm", vllm=vllm)
    sidecar = Sidecar(config, backend=VllmBackend(vllm, engine=engine))
    await sidecar.start()
    sidecars = f"sidecars:\n  - {{name: vllm-0, address: '127.0.0.1:{sidecar.port}'}}\n"
    link = "  link: {heartbeat_timeout_s: 30.0}"
    text = f"gateway:\n{link}\n{settings_yaml}\n{sidecars}"
    gateway = Gateway(parse(text), http_port=0, grpc_port=0)
    await gateway.start()
    try:
        assert await gateway.fleet.wait_connected(30.0), "the sidecar did not connect"
        yield VllmCluster(sidecar, gateway)
    finally:
        await gateway.stop(1.0)
        await sidecar.stop(1.0)
