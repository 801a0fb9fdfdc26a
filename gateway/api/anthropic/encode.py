"""Encoding of Anthropic's Message object and of its SSE events into bytes.

A stream is: message_start, content_block_start (one text block), ping, content_block_delta
(text_delta) per engine delta, content_block_stop, message_delta (stop_reason, usage), and
message_stop; each an `event:` line and a `data:` line of JSON. The text deltas are the hot
path: `EventEncoder` renders their constant part once.
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
_BLOCK_START: Final = (
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
    b'\n\nevent: ping\ndata: {"type":"ping"}\n\n'
)
_BLOCK_STOP: Final = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
_MESSAGE_STOP: Final = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def message_id(request_id: str) -> str:
    return "msg_" + request_id


def stop_reason(finish: Finish, stop_sequence: str | None) -> str:
    """Anthropic's stop_reason for how a generation ended."""
    if finish is Finish.LENGTH:
        return "max_tokens"
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
) -> bytes:
    """The body of a non-streamed answer: the Message object."""
    body = _message(request_id, model, [{"type": "text", "text": _scrub(text)}], usage)
    body["stop_reason"] = stop_reason(finish, stop_sequence)
    body["stop_sequence"] = stop_sequence
    return _encode(body)


def _event(name: bytes, data: dict[str, Any]) -> bytes:
    return b"event: " + name + b"\ndata: " + _encode(data) + b"\n\n"


class EventEncoder:
    """Renders the SSE events of one streamed Message."""

    __slots__ = ("_model", "_request_id")

    def __init__(self, request_id: str, model: str) -> None:
        self._request_id = request_id
        self._model = model

    def start_into(self, buf: bytearray, input_tokens: int) -> None:
        """message_start (usage so far), the text block's start, and a ping."""
        message = _message(self._request_id, self._model, [], Usage(input_tokens, 0))
        buf += _event(b"message_start", {"type": "message_start", "message": message})
        buf += _BLOCK_START

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
        buf: bytearray, finish: Finish, stop_sequence: str | None, output_tokens: int
    ) -> None:
        """content_block_stop, message_delta (stop_reason, usage) and message_stop."""
        buf += _BLOCK_STOP
        delta = {"stop_reason": stop_reason(finish, stop_sequence), "stop_sequence": stop_sequence}
        data = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}}
        buf += _event(b"message_delta", data)
        buf += _MESSAGE_STOP
