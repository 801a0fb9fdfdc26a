"""A real `vllm serve` of the tiny model, with the engine arguments of the tests' shared engine.

The gateway's answers are compared with this server's: both load the same seeded dummy weights
with the same arguments, so greedy (or seeded) answers must be identical.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.vllm_serve import serve_argv

# `vllm serve`'s flags beyond the engine's (those of configs/local-vllm.yaml's comparison).
SERVE_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")
_START_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2.0) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def vllm_serve(config: VllmConfig, log_path: Path, *flags: str) -> Iterator[str]:
    """Start the server, wait until /health answers; yields its base URL (no /v1)."""
    port = _free_port()
    argv = [sys.executable, "-m", "engine_sidecar.vllm_serve", *serve_argv(config, port, *flags)]
    env = {**os.environ, **config.env, "VLLM_TARGET_DEVICE": "cpu"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"vllm serve did not start (exit {proc.returncode}):\n{tail}")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10.0)
