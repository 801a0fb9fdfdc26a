"""`shardgate up`: start the configured local sidecars as child processes, then the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import aiohttp

from engine_sidecar import config as sidecar_config
from gateway import procs
from gateway.app import Gateway
from gateway.config.schema import Config, SidecarEndpoint
from gateway.procs import child_env
from gateway.workers import Workers

log = logging.getLogger(__name__)

UP_WAIT_S = 300.0


def launch_config(endpoint: SidecarEndpoint) -> dict[str, Any]:
    host, _, port = endpoint.address.rpartition(":")
    data = dict(endpoint.launch or {})
    data.update(name=endpoint.name, host=host, port=int(port))
    return data


def check_launch(config: Config) -> None:
    """Validate every `launch` section with the sidecar's own schema (raises ValueError)."""
    for i, e in enumerate(config.sidecars):
        if e.launch is not None:
            sidecar_config.decode(launch_config(e), f"sidecars[{i}].launch: ")


def sidecar_argv(e: SidecarEndpoint, log_level: str) -> list[str]:
    """The command that runs the sidecar of `e`'s `launch` section."""
    config = json.dumps(launch_config(e))
    return [
        sys.executable,
        "-m",
        "engine_sidecar",
        "--config-json",
        config,
        "--log-level",
        log_level,
    ]


class LocalSidecars:
    def __init__(self, endpoints: list[SidecarEndpoint], log_level: str) -> None:
        self._endpoints = [e for e in endpoints if e.launch is not None]
        self._log_level = log_level
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for e in self._endpoints:
            cmd = sidecar_argv(e, self._log_level)
            self.procs.append(subprocess.Popen(cmd, env=child_env()))
            log.info("started sidecar %s (pid %d) on %s", e.name, self.procs[-1].pid, e.address)

    def dead(self) -> list[int]:
        return procs.exited(self.procs)

    async def stop(self, grace_s: float = 10.0) -> None:
        await procs.terminate(self.procs, grace_s)


def banner(config: Config, http_port: int, grpc_port: int) -> str:
    s = config.gateway
    scheme = "https" if s.http.tls is not None else "http"
    base = f"{scheme}://{s.http.host}:{http_port}/v1"
    return (
        f"shardgate is up: OpenAI API at {base}, gRPC at {s.grpc.host}:{grpc_port}\n"
        f"  curl {base}/chat/completions -H 'Content-Type: application/json' \\\n"
        '    -d \'{"model": "sim-llama", "messages": [{"role": "user", "content": "Hi"}]}\'\n'
        f'  python -c \'import openai; c = openai.OpenAI(base_url="{base}", api_key="none"); '
        'print(c.chat.completions.create(model="sim-llama", '
        'messages=[{"role": "user", "content": "Hi"}]).choices[0].message.content)\'\n'
        "Ctrl-C stops the gateway and its sidecars."
    )


def _never() -> bool:
    return False


async def _wait_ready(
    url: str,
    deadline: float,
    connector: aiohttp.BaseConnector | None = None,
    tls: bool = False,
    give_up: Callable[[], bool] = _never,
) -> bool:
    """Poll `url` (a /readyz) until it answers 200, `deadline` (loop time) passes or
    `give_up()`; over TLS not checking the certificate, of our own child on our own host."""
    loop = asyncio.get_running_loop()
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        while loop.time() < deadline and not give_up():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url, ssl=not tls) as resp:
                    if resp.status == 200:
                        return True
            await asyncio.sleep(0.2)
    return False


async def workers_ready(
    pool: Workers, host: str, port: int, tls: bool, timeout_s: float = UP_WAIT_S
) -> bool:
    """Every worker ready (each asked on its own socket: the kernel would spread a public
    /readyz over them, and one ready is not all), then the public port answering; False at
    once when a worker has exited."""
    deadline = asyncio.get_running_loop().time() + timeout_s

    def exited() -> bool:
        return bool(pool.exited())

    own = await asyncio.gather(
        *(
            _wait_ready(
                "http://worker/readyz", deadline, aiohttp.UnixConnector(path=str(p)), give_up=exited
            )
            for p in pool.sockets()
        )
    )
    url = f"{'https' if tls else 'http'}://{host}:{port}/readyz"
    return all(own) and await _wait_ready(url, deadline, tls=tls, give_up=exited)


async def _serve(
    config: Config,
    path: str,
    http_port: int | None,
    grpc_port: int | None,
    log_level: str,
    workers: int,
    sidecars: LocalSidecars | None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    s = config.gateway
    gw: Gateway | None = None
    pool: Workers | None = None
    try:
        if sidecars is not None:
            sidecars.start()
        if workers > 1:
            pool = Workers(workers, path, http_port, grpc_port, log_level)
            loop.add_signal_handler(signal.SIGHUP, pool.signal, signal.SIGHUP)
            pool.start()
            ports = (
                s.http.port if http_port is None else http_port,
                s.grpc.port if grpc_port is None else grpc_port,
            )
            ready = await workers_ready(pool, s.http.host, ports[0], s.http.tls is not None)
        else:
            gw = Gateway(config, http_port, grpc_port, config_path=path)
            if gw.reloader is not None:
                loop.add_signal_handler(signal.SIGHUP, gw.reloader.reload, "SIGHUP")
            await gw.start()
            ports = (gw.http_port, gw.grpc_port)
            # Real engines can take minutes to start (vLLM loads weights and warms up).
            ready = await gw.fleet.wait_connected(UP_WAIT_S)
        if ready:
            print(banner(config, *ports), flush=True)
        elif pool is None or not pool.exited():
            log.error("not ready within %.0f s; serving what is up", UP_WAIT_S)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if sidecars is not None and sidecars.dead() and not stop.is_set():
                log.warning("sidecar process(es) exited: %s", sidecars.dead())
            if pool is not None and pool.exited() and not stop.is_set():
                log.error("gateway worker(s) exited: %s; stopping", pool.exited())
                return 1
        return 0
    finally:
        log.info("stopping")
        if gw is not None:
            await gw.stop()
        if pool is not None:
            await pool.stop(s.drain_timeout_s + 5)
        if sidecars is not None:
            await sidecars.stop()


async def run_workers(config: Config, path: str, args: Any) -> int:
    """`shardgate gateway --workers N`."""
    return await _serve(
        config, path, args.http_port, args.grpc_port, args.log_level, args.workers, None
    )


async def up(
    config: Config,
    path: str,
    http_port: int | None,
    grpc_port: int | None,
    log_level: str,
    workers: int = 1,
) -> int:
    """`shardgate up`: the local sidecars, then the gateway (or its workers)."""
    sidecars = LocalSidecars(config.sidecars, log_level)
    return await _serve(config, path, http_port, grpc_port, log_level, workers, sidecars)
