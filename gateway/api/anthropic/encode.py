"""Encoding of Anthropic's Message object and of its SSE events into bytes.

A stream is: message_start, content_block_start (one text block), ping, content_block_delta
(text_delta) per engine delta, content_block_stop, message_delta (stop_reason, usage), and
message_stop; each an `event:` line and a `data:` line of JSON. The text deltas are the hot
path: `EventEncoder` renders their constant part once. An answer with tools has its blocks
opened as they come instead (blocks_stream.py): text, then a tool_use block per call.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from gateway.types import Finish, Logprobs, Usage

__all__ = [
    "EventEncoder",
    "encode_message",
    "message_id",
    "stop_reason",
]

_encoder: Final = msgspec.json.Encoder()
_encode: Final = _encoder.encode
_encode_into: Final = _encoder.encode_into

_DELTA_PREFIX: Final = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":'
)
_DELTA_SUFFIX: Final = b"}}\n\n"
_TEXT_START: Final = (
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
    b"\n\n"
)
_PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'
_BLOCK_STOP: Final = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
_MESSAGE_STOP: Final = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def message_id(request_id: str) -> str:
    return "msg_" + request_id


def stop_reason(finish: Finish, stop_sequence: str | None, tool_used: bool = False) -> str:
    """Anthropic's stop_reason for how a generation ended: "tool_use" whenever the model
    called a tool (as vLLM's Anthropic server says, a named function's call too)."""
    if finish is Finish.LENGTH:
        return "max_tokens"
    if tool_used:
        return "tool_use"
    return "stop_sequence" if stop_sequence else "end_turn"


def _scrub(text: str) -> str:
    """`text` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _usage(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}


def _message(request_id: str, model: str, content: list[Any], usage: Usage) -> dict[str, Any]:
    return {
        "id": message_id(request_id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(usage),
    }


def encode_message(
    request_id: str,
    model: str,
    text: str,
    finish: Finish,
    stop_sequence: str | None,
    usage: Usage,
    tool_uses: list[dict[str, Any]] | None = None,
) -> bytes:
    """The body of a non-streamed answer: the Message object; its text block (one, empty, for
    an empty answer) and then its tool_use blocks."""
    content: list[Any] = [{"type": "text", "text": _scrub(text)}] if text or not tool_uses else []
    content += tool_uses or ()
    body = _message(request_id, model, content, usage)
    body["stop_reason"] = stop_reason(finish, stop_sequence, bool(tool_uses))
    body["stop_sequence"] = None if tool_uses else stop_sequence
    return _encode(body)


def event(name: bytes, data: dict[str, Any]) -> bytes:
    return b"event: " + name + b"\ndata: " + _encode(data) + b"\n\n"


class EventEncoder:
    """Renders the SSE events of one streamed Message."""

    __slots__ = ("_model", "_request_id")

    def __init__(self, request_id: str, model: str) -> None:
        self._request_id = request_id
        self._model = model

    def start_into(self, buf: bytearray, input_tokens: int, text_block: bool = True) -> None:
        """message_start (usage so far), the text block's start (unless its blocks open as
        they come), and a ping."""
        message = _message(self._request_id, self._model, [], Usage(input_tokens, 0))
        buf += event(b"message_start", {"type": "message_start", "message": message})
        if text_block:
            buf += _TEXT_START
        buf += _PING

    def token_chunk_into(
        self, buf: bytearray, text: str, logprobs: list[Logprobs] | None = None
    ) -> None:
        """Append one content_block_delta carrying `text` to `buf` (Anthropic's API has no
        logprobs: its requests ask for none)."""
        buf += _DELTA_PREFIX
        try:
            _encode_into(text, buf, -1)
        except UnicodeEncodeError:  # lone surrogates: leaves buf as it was
            _encode_into(_scrub(text), buf, -1)
        buf += _DELTA_SUFFIX

    @staticmethod
    def finish_into(
        buf: bytearray,
        finish: Finish,
        stop_sequence: str | None,
        output_tokens: int,
        text_block: bool = True,
        tool_used: bool = False,
    ) -> None:
        """content_block_stop (of the text block, if `text_block`), message_delta
        (stop_reason, usage) and message_stop."""
        if text_block:
            buf += _BLOCK_STOP
        if tool_used:
            stop_sequence = None
        reason = stop_reason(finish, stop_sequence, tool_used)
        delta = {"stop_reason": reason, "stop_sequence": stop_sequence}
        data = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}}
        buf += event(b"message_delta", data)
        buf += _MESSAGE_STOP
