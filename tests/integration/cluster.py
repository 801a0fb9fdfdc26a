"""A real local cluster for tests: sim sidecars and the gateway on loopback ports.

It runs on its own uvloop event loop in a background thread, so tests drive it with ordinary
blocking clients (the openai SDK, generated gRPC stubs) the way users do.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse

T = TypeVar("T")


async def cut(sidecar: Sidecar) -> None:
    """Close every connection of `sidecar` at once, with no drain, as a dead process would."""
    await sidecar.tcp_link.stop()
    await sidecar.server.stop(None)


class Cluster:
    def __init__(
        self,
        gateway_yaml: str,
        sidecars: list[dict[str, Any]],
        config_path: Path | None = None,
        linked: list[int] | None = None,
        external: list[tuple[str, str]] | None = None,
        before_gateway: Callable[[list[Sidecar]], Awaitable[None]] | None = None,
    ) -> None:
        """`linked`: the sidecars the gateway's config lists (default all); with `config_path`
        the config is written there and the gateway reloads it. `external`: (name, address) of
        sidecars that run elsewhere (their own processes), listed too. `before_gateway` runs
        on the cluster's loop once the sidecars are up, before the gateway starts."""
        self._gateway_yaml = gateway_yaml
        self._sidecar_specs = sidecars
        self.config_path = config_path
        self._linked = linked
        self._external = external or []
        self._before_gateway = before_gateway
        self.sidecars: list[Sidecar] = []
        self.gateway: Gateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: Future[None] = Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="cluster", daemon=True)

    # -- driving it from tests ---------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    @property
    def http_url(self) -> str:
        assert self.gateway is not None
        return f"http://127.0.0.1:{self.gateway.http_port}"

    @property
    def grpc_target(self) -> str:
        assert self.gateway is not None
        return f"127.0.0.1:{self.gateway.grpc_port}"

    def sidecar_targets(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.sidecars]

    def config_text(self, gateway_yaml: str, linked: list[int]) -> str:
        """A gateway config listing the given sidecars."""
        lines = [gateway_yaml, "sidecars:"]
        lines += [
            f"  - {{name: {self.sidecars[i].config.name}, "
            f"address: '127.0.0.1:{self.sidecars[i].port}'}}"
            for i in linked
        ]
        lines += [f"  - {{name: {name}, address: '{address}'}}" for name, address in self._external]
        return "\n".join(lines) + "\n"

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> None:
        self._thread.start()
        self._ready.result(timeout_s)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30.0)

    def _main(self) -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            for i, spec in enumerate(self._sidecar_specs):
                cfg = SidecarConfig(name=f"sim-{i}", host="127.0.0.1", port=0, **spec)
                sidecar = Sidecar(cfg)
                await sidecar.start()
                self.sidecars.append(sidecar)
            if self._before_gateway is not None:
                await self._before_gateway(self.sidecars)
            linked = range(len(self.sidecars)) if self._linked is None else self._linked
            text = self.config_text(self._gateway_yaml, list(linked))
            if self.config_path is not None:
                self.config_path.write_text(text)
            self.gateway = Gateway(
                parse(text), http_port=0, grpc_port=0, config_path=self.config_path
            )
            await self.gateway.start()
            if not await self.gateway.fleet.wait_connected(10.0):
                raise RuntimeError("sidecars did not connect")
        except BaseException as e:
            self._ready.set_exception(e)
            raise
        self._ready.set_result(None)
        await self._stop.wait()
        await self.gateway.stop(1.0)
        for s in self.sidecars:
            await s.stop(0.5)
