"""The connection to one engine server: an aiohttp session for plain calls, and a bounded pool of
connections for the streamed ones, read in their protocol callbacks (sse_conn.py).

Every call has a deadline: plain calls the rpc timeout, streams a deadline for their first
chunk, then for each next one, and one for the whole request. A refusal (an HTTP error status)
raises ServerRefused with the server's message; a server that cannot be reached raises
aiohttp.ClientError or TimeoutError.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import aiohttp

from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.pool import Pool
from engine_sidecar.backends.openai.sse_conn import Handler, ServerStatus


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
        self._pool: Pool | None = None  # (the streamed calls')

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
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
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

    async def stream(self, path: str, body: dict[str, Any], handler: Handler) -> None:
        """One streamed call: each `data:` payload of the server's events goes to `handler`
        (sse_conn.py) until it ends the call, `[DONE]` comes, or the server ends the stream.

        A handler that answers STOP, a failure and a cancellation close the connection: the
        server sees the client gone and aborts the request.
        """
        c = self._config
        if self._pool is None:
            self._pool = Pool(self._url, self._headers, c.max_connections, c.connect_timeout_s)
        timeouts = (c.first_chunk_timeout_s, c.chunk_timeout_s, c.rpc_timeout_s)
        for attempt in range(2):
            call = await self._pool.call(path, body, handler, (*timeouts, c.request_timeout_s))
            try:
                await call.ended
                return
            except ServerStatus as e:
                raise refusal(e.status, e.body) from None
            except ConnectionResetError:
                # A kept connection the server closed as it was reused (its keep-alive ran out
                # then): nothing was answered, so the request goes again on a new one, once.
                if attempt or not call.reused or call.answered:
                    raise
            finally:
                call.close()
