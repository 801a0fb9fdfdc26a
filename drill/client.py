"""One streamed chat completion over the gateway's OpenAI HTTP/SSE API, recorded whole.

Every request has a deadline; whatever happens (error event, broken connection, deadline) ends
up in the record rather than as an exception, except cancellation, which is re-raised.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from drill.requests import RequestRecord, RequestSpec

REPLICA_HEADER = "x-shardgate-replica"


def body(spec: RequestSpec, model: str) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": spec.prompt}],
            "max_tokens": spec.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
    )


def apply_event(record: RequestRecord, data: bytes, pieces: list[str]) -> None:
    """Fold one SSE `data:` payload into the record."""
    if data == b"[DONE]":
        record.done = True
        return
    if record.done:
        record.error = record.error or "data after [DONE]"
        return
    try:
        chunk: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        record.error = record.error or "a chunk that is no JSON"
        return
    if not isinstance(chunk, dict):
        record.error = record.error or "a chunk that is no JSON object"
        return
    err = chunk.get("error")
    if err is not None:
        msg = err.get("message") if isinstance(err, dict) else err
        record.error = record.error or f"error event: {msg}"
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            pieces.append(content)
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        record.completion_tokens = usage.get("completion_tokens")


async def stream_one(
    session: aiohttp.ClientSession,
    base_url: str,
    spec: RequestSpec,
    model: str,
    timeout_s: float,
) -> RequestRecord:
    record = RequestRecord(index=spec.index, started=time.monotonic())
    pieces: list[str] = []
    try:
        async with asyncio.timeout(timeout_s):
            await _exchange(session, base_url, spec, model, record, pieces)
    except TimeoutError:
        record.error = record.error or f"no end within {timeout_s:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        record.error = record.error or f"{type(e).__name__}: {e}"
    record.text = "".join(pieces)
    record.ended = time.monotonic()
    return record


async def _exchange(
    session: aiohttp.ClientSession,
    base_url: str,
    spec: RequestSpec,
    model: str,
    record: RequestRecord,
    pieces: list[str],
) -> None:
    async with session.post(
        f"{base_url}/v1/chat/completions",
        data=body(spec, model),
        headers={"Content-Type": "application/json"},
    ) as resp:
        record.status = resp.status
        record.replica = resp.headers.get(REPLICA_HEADER, "")
        if resp.status != 200:
            text = (await resp.content.read(4096)).decode(errors="replace")
            record.error = f"http {resp.status}: {text[:200]}"
            return
        async for line in resp.content:
            if line.startswith(b"data:"):
                apply_event(record, line[5:].strip(), pieces)
