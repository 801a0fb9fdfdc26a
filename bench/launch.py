"""Starts a gateway for a bench run (`shardgate up --config ...` as a child), waits until it
serves every replica of the model, and stops it afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import orjson

from bench.http1 import HttpError, connect
from gateway.config.loader import load
from gateway.procs import child_env  # SIGTERM when the bench dies: no gateway outlives it


def shardgate_command() -> list[str]:
    exe = Path(sys.executable).with_name("shardgate")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]


class _Collect:
    """A Sink that keeps a small body."""

    def __init__(self) -> None:
        self.status = 0
        self.body = bytearray()

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def feed(self, data: bytes, now: float) -> None:
        if len(self.body) < 1 << 20:
            self.body += data


async def get_text(host: str, port: int, path: str, timeout_s: float) -> tuple[int, str]:
    """One GET on a fresh connection: (status, body as text; at most 1 MiB kept)."""
    async with asyncio.timeout(timeout_s):
        conn = await connect(host, port, timeout_s)
        try:
            sink = _Collect()
            req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
            await conn.send(req.encode(), sink)
        finally:
            conn.close()
    return sink.status, sink.body.decode(errors="replace")


async def get_json(host: str, port: int, path: str, timeout_s: float) -> tuple[int, object]:
    """One GET on a fresh connection: (status, decoded JSON body or None)."""
    status, body = await get_text(host, port, path, timeout_s)
    try:
        return status, orjson.loads(body)
    except orjson.JSONDecodeError:
        return status, None


class LaunchedGateway:
    def __init__(self, config_path: str, log_path: Path, log_level: str = "WARNING") -> None:
        self.config_path = config_path
        self.log_level = log_level
        self.config = load(config_path)
        s = self.config.gateway
        self.host = s.http.host
        self.http_port = s.http.port
        self.grpc_target = f"{s.grpc.host}:{s.grpc.port}"
        self.sidecars = [e.address for e in self.config.sidecars]
        self._log_path = log_path
        self._log: IO[bytes] | None = None
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, model: str, timeout_s: float = 60.0) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self._log_path.open("wb")
        cmd = [
            *shardgate_command(),
            "up",
            "--config",
            self.config_path,
            "--log-level",
            self.log_level,
        ]
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=self._log, stderr=subprocess.STDOUT, env=child_env()
        )
        try:
            await self._wait_ready(model, timeout_s)
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self, model: str, timeout_s: float) -> None:
        """Polls /v1/models until it lists `model`, then /readyz until every sidecar serves it."""
        assert self.proc is not None
        want = len(self.sidecars)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise RuntimeError(
                    f"the gateway exited with status {self.proc.returncode}; "
                    f"see {self._log_path}:\n{self._tail()}"
                )
            with contextlib.suppress(OSError, TimeoutError, HttpError):
                if await self._ready(model, want):
                    return
            await asyncio.sleep(0.1)
        raise RuntimeError(
            f"the gateway was not ready within {timeout_s:.0f} s; see {self._log_path}"
        )

    async def _ready(self, model: str, want: int) -> bool:
        status, body = await get_json(self.host, self.http_port, "/v1/models", 2.0)
        if status != 200 or not isinstance(body, dict):
            return False
        if model not in [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]:
            return False
        _, ready = await get_json(self.host, self.http_port, "/readyz", 2.0)
        models = ready.get("models", {}) if isinstance(ready, dict) else {}
        return isinstance(models, dict) and models.get(model, 0) >= want

    def _tail(self, n: int = 2000) -> str:
        try:
            return self._log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    async def stop(self, grace_s: float = 15.0) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                proc.kill()
                await asyncio.wait_for(proc.wait(), 5.0)
        if self._log is not None:
            self._log.close()
            self._log = None
