"""A real `vllm serve` of the tiny model, with the engine arguments of the tests' shared engine.

The gateway's answers are compared with this server's: both load the same seeded dummy weights
with the same arguments, so greedy (or seeded) answers must be identical. It starts while the
session's event loop runs on (the shared engine's gateways keep their heartbeats meanwhile).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.vllm_serve import serve_argv
from tests.ports import free_port

_START_TIMEOUT_S = 300.0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2.0) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _first_completion(url: str, timeout_s: float) -> None:
    with urllib.request.urlopen(url + "/v1/models", timeout=timeout_s) as r:
        model = json.load(r)["data"][0]["id"]
    body = json.dumps({"model": model, "prompt": "Hi", "max_tokens": 1}).encode()
    head = {"Content-Type": "application/json"}
    post = urllib.request.Request(url + "/v1/completions", data=body, headers=head)
    with urllib.request.urlopen(post, timeout=timeout_s) as r:
        assert r.status == 200, f"vllm serve's first completion: {r.status}"


def _start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


@asynccontextmanager
async def vllm_serve(config: VllmConfig, log_path: Path, *flags: str) -> AsyncIterator[str]:
    """Start the server (its flags from `config`, then `flags`), wait until /health answers and
    it has served a first completion; yields its base URL (no /v1)."""
    port = free_port()
    argv = [sys.executable, "-m", "engine_sidecar.vllm_serve", *serve_argv(config, port, *flags)]
    env = {**os.environ, **config.env, "VLLM_TARGET_DEVICE": "cpu"}
    proc = await asyncio.to_thread(_start, argv, env, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not await asyncio.to_thread(_healthy, url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (await asyncio.to_thread(log_path.read_text, errors="replace"))[-4000:]
                raise RuntimeError(f"vllm serve did not start (exit {proc.returncode}):\n{tail}")
            await asyncio.sleep(0.25)
        # Its first completion can take many seconds more (the engine warming up on a busy
        # CPU): the tests' clients hold it to deadlines of a few, so it is served one first.
        await asyncio.to_thread(_first_completion, url, _START_TIMEOUT_S)
        yield url
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10.0)
