"""`shardgate up`: start the configured local sidecars as child processes, then the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

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


class Listening(NamedTuple):
    host: str
    port: int
    setting: str  # what sets the port
    moved_by: str = "--port-offset"  # what else moves it ("": nothing)

    def named(self) -> str:
        return f"{self.setting}; {self.moved_by} moves it" if self.moved_by else self.setting


def listens(
    config: Config, http_port: int | None, grpc_port: int | None, sidecars: bool = True
) -> list[Listening]:
    """Every fixed port `shardgate up` will listen on, its sidecars' included unless not
    `sidecars` (`shardgate gateway`; 0, a free port, is left out); `http_port`, `grpc_port`:
    given on the command line (None: not)."""
    s = config.gateway
    out = []
    for name, listen, given in (("http", s.http, http_port), ("grpc", s.grpc, grpc_port)):
        if given is None:
            flags = f"--{name}-port or --port-offset"
            out.append(Listening(listen.host, listen.port, f"gateway.{name}.port", flags))
        else:
            out.append(Listening(listen.host, given, f"--{name}-port", ""))
    for i, e in enumerate(config.sidecars):
        if e.launch is None or not sidecars:
            continue
        c = sidecar_config.decode(launch_config(e))
        out.append(Listening(c.host, c.port, f"sidecars[{i}].address"))
        for key, port in (("link_port", c.link_port), ("metrics_port", c.metrics_port)):
            if port is not None:
                out.append(Listening(c.host, port, f"sidecars[{i}].launch.{key}"))
    return [x for x in out if x.port > 0]


def _bind_error(host: str, port: int) -> OSError | None:
    """Why a server could not listen on `host`:`port` now (None: it could), binding as servers
    do (SO_REUSEADDR: a port that only lingers in TIME_WAIT is free)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return e
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as e:
                return e
    return None


def port_conflict(
    config: Config, http_port: int | None, grpc_port: int | None, sidecars: bool = True
) -> str | None:
    """The first port `shardgate up` (or, not `sidecars`, `shardgate gateway`) could not listen
    on, as one line naming the setting that moves it (None: every one is free)."""
    seen: dict[tuple[str, int], Listening] = {}
    for x in listens(config, http_port, grpc_port, sidecars):
        first = seen.setdefault((x.host, x.port), x)
        if first is not x:
            return f"port {x.port} is given twice ({first.setting} and {x.setting})"
        error = _bind_error(x.host, x.port)
        if error is None:
            continue
        if error.errno == errno.EADDRINUSE:
            return f"port {x.port} is in use ({x.named()})"
        return f"cannot listen on {x.host}:{x.port} ({x.named()}): {error.strerror or error}"
    return None


def sidecar_argv(e: SidecarEndpoint, log_level: str, log_format: str = "json") -> list[str]:
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
        "--log-format",
        log_format,
    ]


class LocalSidecars:
    def __init__(
        self, endpoints: list[SidecarEndpoint], log_level: str, log_format: str = "json"
    ) -> None:
        self._endpoints = [e for e in endpoints if e.launch is not None]
        self._log_level = log_level
        self._log_format = log_format
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for e in self._endpoints:
            cmd = sidecar_argv(e, self._log_level, self._log_format)
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
    port_offset: int = 0,
    log_format: str = "json",
) -> int:
    """`config`: its ports already moved by `port_offset` (gateway/config/offset.py), which
    the gateway (or each worker) moves the file's by again on a reload."""
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
            pool = Workers(workers, path, http_port, grpc_port, log_level, port_offset, log_format)
            loop.add_signal_handler(signal.SIGHUP, pool.signal, signal.SIGHUP)
            pool.start()
            ports = (
                s.http.port if http_port is None else http_port,
                s.grpc.port if grpc_port is None else grpc_port,
            )
            ready = await workers_ready(pool, s.http.host, ports[0], s.http.tls is not None)
        else:
            gw = Gateway(config, http_port, grpc_port, config_path=path, port_offset=port_offset)
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
        config,
        path,
        args.http_port,
        args.grpc_port,
        args.log_level,
        args.workers,
        None,
        args.port_offset,
        args.log_format,
    )


async def up(
    config: Config,
    path: str,
    http_port: int | None,
    grpc_port: int | None,
    log_level: str,
    workers: int = 1,
    port_offset: int = 0,
    log_format: str = "json",
) -> int:
    """`shardgate up`: the local sidecars, then the gateway (or its workers); `config` with
    its ports moved by `port_offset`."""
    sidecars = LocalSidecars(config.sidecars, log_level, log_format)
    return await _serve(
        config, path, http_port, grpc_port, log_level, workers, sidecars, port_offset, log_format
    )
