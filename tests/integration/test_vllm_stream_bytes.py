"""A default stream is what `vllm serve` sends, byte for byte (apart from ids and timestamps).

Unchanged third-party clients read the bytes, not the chunks: vLLM's own benchmark client splits
events on a blank line and strips a leading `data: `, so an `id:` line, a comment or a space
that `vllm serve` does not send breaks it. Both servers run the tiny model with the same engine
arguments (tests/vllm_server.py), so greedy requests give the same tokens; the raw bodies are
compared whole, after the response ids, `created` times and fingerprints are masked. A stream
that asks to be kept (`x-shardgate-resumable: true`) is the same stream with an `id:` line on
each event.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from gateway.streams.ask import RESUMABLE_HEADER
from tests.integration.vllm_cluster import vllm_cluster

pytestmark = pytest.mark.timeout(900)  # may start the shared engine and vllm serve

MODEL = "tiny-llama"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three shards of glass."},
]
GREEDY: dict[str, Any] = {"model": MODEL, "temperature": 0.0, "max_tokens": 10, "stream": True}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": MESSAGES}),
    "chat_usage": (
        "/v1/chat/completions",
        {"messages": MESSAGES, "stream_options": {"include_usage": True}},
    ),
    "chat_logprobs": (
        "/v1/chat/completions",
        {"messages": MESSAGES, "logprobs": True, "top_logprobs": 2},
    ),
    "chat_stop": ("/v1/chat/completions", {"messages": MESSAGES, "stop": ["e"]}),
    "completion": ("/v1/completions", {"prompt": "Shards of"}),
    "completion_usage": (
        "/v1/completions",
        {"prompt": "Shards of", "stream_options": {"include_usage": True}},
    ),
}
# vllm serve sends an echoed prompt with the first token, in one event that carries the
# prompt's token ids; the gateway sends the prompt as its own event (it would need the prompt's
# ids from its replica first, as for return_token_ids).
ECHO = ("/v1/completions", {"prompt": "Shards of", "echo": True})

# What differs by nature between two servers: each response's id and creation time, and the
# server's fingerprint (vLLM's names its version and config hash; the gateway's, itself).
_MASKS = (
    (re.compile(rb'"id":"(chatcmpl|cmpl)-[^"]*"'), rb'"id":"\1-ID"'),
    (re.compile(rb'"created":\d+'), rb'"created":0'),
    (re.compile(rb'"system_fingerprint":"[^"]*"'), rb'"system_fingerprint":"FP"'),
)


def masked(body: bytes) -> bytes:
    for pattern, repl in _MASKS:
        body = pattern.sub(repl, body)
    return body


@pytest_asyncio.fixture(scope="module")
async def gateway_url(tiny_model_dir: Path, vllm_engine: Any) -> AsyncIterator[str]:
    async with vllm_cluster(tiny_model_dir, vllm_engine) as c:
        await c.routable()
        yield c.base_url.removesuffix("/v1")


async def _raw(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Headers, bytes]:
    async with http.stream("POST", url, json=body, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        return r.headers, b"".join([part async for part in r.aiter_raw()])


@pytest.mark.parametrize(
    "case",
    [
        *sorted(CASES),
        pytest.param("echo", marks=pytest.mark.xfail(strict=True, reason="echo: its own event")),
    ],
)
async def test_a_default_stream_is_vllm_serve_s_bytes(
    gateway_url: str, vllm_server: str, case: str
) -> None:
    path, fields = CASES[case] if case != "echo" else ECHO
    body = {**GREEDY, **fields}
    async with httpx.AsyncClient(timeout=120.0) as http:
        ours_head, ours = await _raw(http, gateway_url + path, body)
        theirs_head, theirs = await _raw(http, vllm_server + path, body)
    assert b"data: [DONE]" in theirs  # (the reference streamed)
    # (event by event: a failure shows the first event that differs)
    assert masked(ours).split(b"\n\n") == masked(theirs).split(b"\n\n")
    assert ours == ours.replace(b"\r", b"")  # (one line ending, as vllm serve's)
    assert ours_head["content-type"] == theirs_head["content-type"]
    assert "x-shardgate-stream-id" not in ours_head


async def test_a_kept_stream_is_the_same_events_each_with_its_id(gateway_url: str) -> None:
    path, fields = CASES["chat_usage"]
    body = {**GREEDY, **fields}
    async with httpx.AsyncClient(timeout=120.0) as http:
        _, plain = await _raw(http, gateway_url + path, body)
        head, kept = await _raw(http, gateway_url + path, body, {RESUMABLE_HEADER: "true"})
    sid = head["x-shardgate-stream-id"].encode()
    events = kept.split(b"\n\n")
    assert events.pop() == b""
    stripped = []
    for seq, event in enumerate(events, 1):
        id_line, _, rest = event.partition(b"\n")
        assert id_line == b"id: %s:%d" % (sid, seq)
        stripped.append(rest + b"\n\n")
    assert masked(b"".join(stripped)) == masked(plain)
