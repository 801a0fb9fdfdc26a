"""Sends one request to the OpenAI HTTP/SSE API and verifies its stream."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import orjson

from bench import result as kinds
from bench.http1 import HttpError
from bench.plan import RequestSpec
from bench.pool import Pool
from bench.result import Result
from bench.scenario import Scenario
from bench.sse import SseVerifier


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of `http://host:port[/v1]`; the prefix never ends in /v1."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"--url must look like http://127.0.0.1:8080, got {url!r}")
    prefix = parts.path.rstrip("/").removesuffix("/v1")
    return parts.hostname, parts.port or 80, prefix


class OpenAITarget:
    def __init__(self, url: str, scenario: Scenario) -> None:
        host, port, prefix = split_url(url)
        self.address = f"{host}:{port}"
        self._scenario = scenario
        self._pool = Pool(host, port, scenario.connect_timeout_s, max_idle=scenario.concurrency)
        self._kind = scenario.endpoint
        path = f"{prefix}/v1/{'chat/completions' if scenario.endpoint == 'chat' else 'completions'}"
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.address}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        ).encode()
        self._class_headers = [b""]
        if scenario.classes:
            self._class_headers = []
            for c in scenario.classes:
                h = ""
                if c.priority is not None:
                    h += f"x-priority: {c.priority}\r\n"
                if c.api_key is not None:
                    h += f"Authorization: Bearer {c.api_key}\r\n"
                if c.slo_ttft_ms is not None:
                    h += f"x-slo-ttft-ms: {c.slo_ttft_ms:g}\r\n"
                if c.slo_tpot_ms is not None:
                    h += f"x-slo-tpot-ms: {c.slo_tpot_ms:g}\r\n"
                self._class_headers.append(h.encode())

    def body(self, spec: RequestSpec) -> bytes:
        s = self._scenario
        req: dict[str, object] = {"model": s.model, "max_tokens": spec.max_tokens, "stream": True}
        if self._kind == "chat":
            req["messages"] = [{"role": "user", "content": spec.prompt}]
        else:
            req["prompt"] = spec.prompt
        req["stream_options"] = {"include_usage": True}
        if s.ignore_eos:
            req["ignore_eos"] = True
        return orjson.dumps(req)

    def request_bytes(self, spec: RequestSpec) -> bytes:
        body = self.body(spec)
        return b"".join(
            (
                self._head,
                self._class_headers[spec.cls],
                b"Content-Length: %d\r\n\r\n" % len(body),
                body,
            )
        )

    async def __call__(self, spec: RequestSpec) -> Result:
        s = self._scenario
        data = self.request_bytes(spec)
        start = time.perf_counter()
        try:
            conn = await self._pool.acquire()
        except (OSError, TimeoutError) as e:
            end = time.perf_counter()
            return Result.failed(
                spec.index, spec.cls, start, end, kinds.CONNECT, f"{kinds.CONNECT}: {e!r}"
            )
        verifier = SseVerifier(self._kind, spec.max_tokens if s.ignore_eos else None, start)
        complete = False
        errors: list[str] = []
        detail = ""
        try:
            async with asyncio.timeout(s.request_timeout_s):
                response = await conn.send(data, verifier)
            complete = response.complete
        except TimeoutError:
            errors.append(kinds.TIMEOUT)
            detail = (
                f"{kinds.TIMEOUT}: no end after {s.request_timeout_s} s, {verifier.tokens} tokens"
            )
        except HttpError as e:
            errors.append(kinds.HTTP_FRAMING)
            detail = f"{kinds.HTTP_FRAMING}: {e}"
        finally:
            self._pool.release(conn)
        end = time.perf_counter()
        if not errors:
            errors = verifier.finish(complete)
            detail = verifier.detail
        return Result.from_clock(
            spec.index, spec.cls, verifier.clock, end, verifier.prompt_tokens, errors, detail
        )

    async def close(self) -> None:
        self._pool.close()
