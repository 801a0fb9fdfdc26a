"""The connection to one engine server: ONE aiohttp session with a bounded connection pool.

Every call has a deadline: plain calls the rpc timeout, streams a deadline for their first
chunk, then for each next one, and one for the whole request. A refusal (an HTTP error status)
raises ServerRefused with the server's message; a server that cannot be reached raises
aiohttp.ClientError or TimeoutError.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from engine_sidecar.backends.openai.config import OpenAIConfig

_DONE = b"[DONE]"
_MAX_LINE = 16 << 20  # one event (a chunk with token ids and text) at most


class ServerRefused(Exception):
    """The server answered with an error status; `param` is the field it names, if any."""

    def __init__(self, status: int, message: str, param: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def refusal(status: int, body: bytes) -> ServerRefused:
    """The server's error body (OpenAI's `{"error": {...}}`, or vLLM's older flat form)."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = str(error.get("message") or f"HTTP {status}")
            return ServerRefused(status, message, str(error.get("param") or ""))
        if isinstance(error, str):
            return ServerRefused(status, error)
    text = body.decode("utf-8", "replace").strip()[:500]
    return ServerRefused(status, text or f"HTTP {status}")


class EngineClient:
    def __init__(self, config: OpenAIConfig) -> None:
        self._config = config
        self._url = config.url
        self._headers: dict[str, str] = {}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if key:
                self._headers["Authorization"] = f"Bearer {key}"
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            c = self._config
            connector = aiohttp.TCPConnector(limit=c.max_connections, limit_per_host=0)
            # Deadlines are set per read below; this one bounds connecting.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=c.connect_timeout_s)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self._headers
            )
        return self._session

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def get(self, path: str, timeout_s: float | None = None) -> bytes:
        """The body of a GET; raises ServerRefused on an error status."""
        async with asyncio.timeout(timeout_s or self._config.rpc_timeout_s):
            async with self._open().get(self._url + path) as r:
                body = await r.read()
                if r.status >= 400:
                    raise refusal(r.status, body)
                return body

    async def post(self, path: str, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """The JSON answer to a POST; raises ServerRefused on an error status."""
        async with asyncio.timeout(timeout_s or self._config.rpc_timeout_s):
            async with self._open().post(self._url + path, json=body) as r:
                data = await r.read()
                if r.status >= 400:
                    raise refusal(r.status, data)
                return json.loads(data)

    async def stream(self, path: str, body: dict[str, Any]) -> AsyncGenerator[bytes, None]:
        """The `data:` payloads of a server-sent event stream, up to `[DONE]`.

        Leaving the iteration early (abort, a stop string of our own, an error) closes the
        connection: the server sees the client gone and aborts the request.
        """
        c = self._config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + c.request_timeout_s
        timeout = c.first_chunk_timeout_s
        async with asyncio.timeout_at(min(loop.time() + timeout, deadline)):
            r = await self._open().post(self._url + path, json=body)
        done = False
        try:
            if r.status >= 400:
                async with asyncio.timeout(c.rpc_timeout_s):
                    raise refusal(r.status, await r.read())
            content = r.content
            rest = b""
            while True:
                # One deadline per read of the socket (it may hold many events), not per line.
                async with asyncio.timeout_at(min(loop.time() + timeout, deadline)):
                    data = await content.readany()
                if not data:
                    return  # the server ended the stream (the reader sees no finish)
                timeout = c.chunk_timeout_s
                *lines, rest = (rest + data).split(b"\n")
                if len(rest) > _MAX_LINE:
                    raise aiohttp.ClientPayloadError(f"an event line over {_MAX_LINE} bytes")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, other fields
                    payload = line[5:].strip()
                    if payload == _DONE:
                        done = True
                        return
                    yield payload
        finally:
            if done:
                r.release()
            else:
                r.close()
