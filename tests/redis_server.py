"""A real redis-server for the tests, on a free loopback port, without persistence.

Skipped where redis-server is not installed, unless SHARDGATE_REQUIRE_ENGINES=1 (set by
`make test`, whose CI installs Debian's package) makes that a failure instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.ports import free_port


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """`start` and `stop` it as often as needed; it keeps its port."""

    def __init__(self, workdir: Path, extra: tuple[str, ...] = ()) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed (apt-get install redis-server)"
            if os.environ.get("SHARDGATE_REQUIRE_ENGINES") == "1":
                pytest.fail(message)
            pytest.skip(message)
        self._binary = binary
        self._dir = workdir
        self._extra = extra
        self.port = free_port(10000 if "--cluster-enabled" in extra else 0)  # (its bus: + 10000)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        args = [self._binary, *self._extra, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self._dir)]
        if not self._extra:
            args += ["--enable-debug-command", "local"]  # DEBUG SLEEP: a slow Redis
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._dir
        )
        deadline = time.monotonic() + timeout_s
        while not _pong(self.port):
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"redis-server did not answer PING within {timeout_s} s")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.kill()
        self._proc.wait(10)
        self._proc = None
