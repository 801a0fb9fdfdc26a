"""Raw OpenAI SSE bodies for verifier tests, rendered by the gateway's own encoder."""

from __future__ import annotations

from gateway.api.openai import encode
from gateway.types import Usage


def events(
    n_tokens: int,
    *,
    kind: encode.ChunkKind = "chat",
    usage: Usage | None = None,
    total: int | None = None,
) -> list[bytes]:
    """The events of a stream with `n_tokens` token chunks, a finish, usage and [DONE]."""
    enc = encode.ChunkEncoder("req-1", "sim-llama", 1700000000, kind)
    out = [enc.role_chunk()] if kind == "chat" else []
    for i in range(n_tokens):
        buf = bytearray()
        enc.token_chunk_into(buf, f" word{i}")
        out.append(bytes(buf))
    buf = bytearray()
    enc.finish_chunk_into(buf, "length")
    out.append(bytes(buf))
    u = usage or Usage(prompt_tokens=12, completion_tokens=n_tokens)
    buf = bytearray()
    enc.usage_chunk_into(buf, u)
    body = bytes(buf)
    if total is not None:
        body = body.replace(b'"total_tokens":%d' % u.total_tokens, b'"total_tokens":%d' % total)
    out.append(body)
    out.append(encode.DONE)
    return out
