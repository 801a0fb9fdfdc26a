"""stream_options.continuous_usage_stats (gateway.api.openai.usage_chunks): each chunk gets the
usage of its choice so far; decoded as vLLM takes it (only with include_usage)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.api.openai import encode
from gateway.api.openai.protocol import decode_chat
from gateway.api.openai.usage_chunks import ChoiceUsage
from gateway.types import Delta


def test_each_chunk_carries_the_usage_so_far() -> None:
    enc = encode.ChunkEncoder("r", "m", 1, "chat")
    usage = ChoiceUsage()
    first = [Delta([], "", prompt_tokens=7), Delta([5, 6], "ab")]
    usage.see_prompt(first)
    buf = bytearray(enc.role_chunk())
    usage.add(buf)
    for d in first:
        usage.see(d)
    enc.token_chunk_into(buf, "ab")
    usage.add(buf)
    usage.see(Delta([8], "c"))
    enc.token_chunk_into(buf, "c")
    usage.add(buf)
    enc.finish_chunk_into(buf, "stop")
    usage.add(buf)
    events = [json.loads(e.removeprefix(b"data: ")) for e in bytes(buf).split(b"\n\n") if e]
    got = [
        (e["usage"]["prompt_tokens"], e["usage"]["completion_tokens"], e["usage"]["total_tokens"])
        for e in events
    ]
    assert got == [(7, 0, 7), (7, 2, 9), (7, 3, 10), (7, 3, 10)]
    assert events[1]["choices"][0]["delta"] == {"content": "ab"}


@pytest.mark.parametrize(
    ("options", "want"),
    [
        ({"include_usage": True, "continuous_usage_stats": True}, True),
        ({"continuous_usage_stats": True}, False),
        ({"include_usage": True}, False),
    ],
)
def test_continuous_usage_needs_include_usage(options: dict[str, Any], want: bool) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body["stream_options"] = options
    assert decode_chat(json.dumps(body).encode(), "r").continuous_usage is want
