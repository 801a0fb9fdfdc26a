"""`shardgate up`: start the configured local sidecars as child processes, then the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import signal
import subprocess
import sys
from typing import Any

from engine_sidecar import config as sidecar_config
from gateway.app import Gateway
from gateway.config.schema import Config, SidecarEndpoint

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
UP_WAIT_S = 300.0


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so no sidecar outlives `up`."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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


class LocalSidecars:
    def __init__(self, endpoints: list[SidecarEndpoint], log_level: str) -> None:
        self._endpoints = [e for e in endpoints if e.launch is not None]
        self._log_level = log_level
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for e in self._endpoints:
            cmd = [
                sys.executable,
                "-m",
                "engine_sidecar",
                "--config-json",
                json.dumps(launch_config(e)),
                "--log-level",
                self._log_level,
            ]
            self.procs.append(subprocess.Popen(cmd, preexec_fn=_die_with_parent))
            log.info("started sidecar %s (pid %d) on %s", e.name, self.procs[-1].pid, e.address)

    def dead(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is not None]

    async def stop(self, grace_s: float = 10.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _ in range(max(1, round(grace_s / 0.05))):
            if all(p.poll() is not None for p in self.procs):
                break
            await asyncio.sleep(0.05)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def banner(gw: Gateway) -> str:
    s = gw.config.gateway
    base = f"http://{s.http.host}:{gw.http_port}/v1"
    return (
        f"shardgate is up: OpenAI API at {base}, gRPC at {s.grpc.host}:{gw.grpc_port}\n"
        f"  curl {base}/chat/completions -H 'Content-Type: application/json' \\\n"
        '    -d \'{"model": "sim-llama", "messages": [{"role": "user", "content": "Hi"}]}\'\n'
        f'  python -c \'import openai; c = openai.OpenAI(base_url="{base}", api_key="none"); '
        'print(c.chat.completions.create(model="sim-llama", '
        'messages=[{"role": "user", "content": "Hi"}]).choices[0].message.content)\'\n'
        "Ctrl-C stops the gateway and its sidecars."
    )


async def up(
    config: Config, path: str, http_port: int | None, grpc_port: int | None, log_level: str
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sidecars = LocalSidecars(config.sidecars, log_level)
    gw = Gateway(config, http_port, grpc_port, config_path=path)
    if gw.reloader is not None:
        loop.add_signal_handler(signal.SIGHUP, gw.reloader.reload, "SIGHUP")
    try:
        sidecars.start()
        await gw.start()
        # Real engines can take minutes to start (vLLM loads weights and warms up).
        if await gw.fleet.wait_connected(UP_WAIT_S):
            print(banner(gw), flush=True)
        else:
            log.error("not every sidecar connected within %.0f s; serving what is up", UP_WAIT_S)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if sidecars.dead() and not stop.is_set():
                log.warning("sidecar process(es) exited: %s", sidecars.dead())
        return 0
    finally:
        log.info("stopping")
        await gw.stop()
        await sidecars.stop()
