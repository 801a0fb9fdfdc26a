"""Encoding of OpenAI response bodies and SSE events into bytes.

Streaming is the hot path: a `ChunkEncoder` renders the constant part of every chunk of its
stream once, so each token chunk costs two byte copies and the JSON encoding of its text.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec
from shardgate.v1.params import Logprobs

from gateway.types import GatewayError, Usage

__all__ = [
    "DONE",
    "SYSTEM_FINGERPRINT",
    "Choice",
    "ChunkEncoder",
    "ChunkKind",
    "Last",
    "encode_chat_completion",
    "encode_completion",
    "error_body",
]

DONE: Final = b"data: [DONE]\n\n"

ChunkKind = Literal["chat", "completion"]
# A request's logprobs in its API's shape (gateway/api/openai/logprobs.py).
LogprobFormat = Callable[[list[Logprobs]], dict[str, Any]]

_encoder: Final = msgspec.json.Encoder()
_encode: Final = _encoder.encode
_encode_into: Final = _encoder.encode_into

# The layout of `vllm serve`'s chunks (0.32), field for field: unchanged third-party clients
# read the bytes. Every choice of a chat chunk ends with its `token_ids` (null unless asked for,
# gateway/api/openai/token_ids.py); a text completion's also with `stop_reason` and
# `prompt_token_ids`. Chat's first chunk carries `prompt_token_ids` and `prompt_text` beside
# its choices; each choice's finish event carries the `system_fingerprint` (with usage asked
# for, the usage event instead), as vLLM stamps them.
_CHAT_CHOICE_END: Final = b',"token_ids":null}]}\n\n'
_TEXT_CHOICE_END: Final = b',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
_ROLE_TAIL: Final = (
    b',"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
)
# The parts of a stream's events after its choice's index that every stream of a kind shares
# (one copy, not one per open stream): token suffix, text end before logprobs, choice end
# after a token's logprobs.
_CHAT_PARTS: Final = (
    b'},"logprobs":null,"finish_reason":null' + _CHAT_CHOICE_END,
    b'},"logprobs":',
    b',"finish_reason":null' + _CHAT_CHOICE_END,
)
_TEXT_PARTS: Final = (
    b',"logprobs":null,"finish_reason":null' + _TEXT_CHOICE_END,
    b',"logprobs":',
    b',"finish_reason":null' + _TEXT_CHOICE_END,
)


def _fingerprint() -> str:
    try:
        return "shardgate-" + importlib.metadata.version("shardgate")
    except importlib.metadata.PackageNotFoundError:  # (run from a source tree, not installed)
        return "shardgate"


# What gateway answers carry as `system_fingerprint` (vLLM's is its version and config hash).
SYSTEM_FINGERPRINT: Final = _fingerprint()


def _scrub(text: str) -> str:
    """`text` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _scrub_all(value: Any) -> Any:
    """`value` (JSON-like) with every string scrubbed."""
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, dict):
        return {k: _scrub_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_all(v) for v in value]
    return value


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _stream_usage(usage: Usage) -> dict[str, Any]:
    """A stream's usage, in `vllm serve`'s order (no prompt_tokens_details: its default)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "completion_tokens": usage.completion_tokens,
    }


class ChunkEncoder:
    """Renders the SSE events of one streamed response (chat or text completion)."""

    __slots__ = (
        "_chat",
        "_choice_end",
        "_fingerprint",
        "_head_len",
        "_lead_len",
        "_logprobs",
        "_lp_end",
        "_role",
        "_token_prefix",
        "_token_suffix",
        "_token_text_end",
    )

    def __init__(
        self,
        request_id: str,
        model: str,
        created: int,
        kind: ChunkKind,
        logprobs: LogprobFormat | None = None,
        index: int = 0,
        role: str = "assistant",
        fingerprint: str = SYSTEM_FINGERPRINT,
    ) -> None:
        """`index`: the choice this encoder's chunks are of (n > 1); `role`: a chat answer's."""
        if kind == "chat":
            id_, obj = "chatcmpl-" + request_id, "chat.completion.chunk"
        elif kind == "completion":
            id_, obj = "cmpl-" + request_id, "text_completion"
        else:
            raise ValueError(f"unknown chunk kind {kind!r}")
        # Everything up to the value of "choices": the same in every chunk of the stream.
        head = b"".join(
            (
                b'data: {"id":',
                _encode(id_),
                b',"object":',
                _encode(obj),
                b',"created":',
                _encode(created),
                b',"model":',
                _encode(model),
                b',"choices":',
            )
        )
        self._logprobs = logprobs
        self._fingerprint = b',"system_fingerprint":' + _encode(fingerprint)
        choice = b'[{"index":%d,' % index
        # An open stream holds its token events' prefix only: the head and the choice are its
        # first bytes; the first and last events are made when written (once a stream).
        self._head_len = len(head)
        self._lead_len = len(head) + len(choice)
        self._role: str | None
        self._chat = kind == "chat"
        if self._chat:
            self._role = role
            self._token_prefix = head + choice + b'"delta":{"content":'
            self._token_suffix, self._token_text_end, self._lp_end = _CHAT_PARTS
            self._choice_end = b',"token_ids":null}]'
        else:
            self._role = None  # (no role chunk)
            self._token_prefix = head + choice + b'"text":'
            self._token_suffix, self._token_text_end, self._lp_end = _TEXT_PARTS
            self._choice_end = b',"prompt_token_ids":null,"token_ids":null}]'

    def plain_tokens(self) -> tuple[bytes, bytes] | None:
        """(before, after) the JSON string of the text in every token event of this stream
        (`token_chunk_into` writes before + text + after when no logprobs go with it); None
        when its tokens carry logprobs."""
        if self._logprobs is not None:
            return None
        return self._token_prefix, self._token_suffix

    def role_chunk(self) -> bytes:
        """The first event of a chat stream (the assistant role); b"" for completions."""
        if self._role is None:
            return b""
        role = b'"delta":{"role":%s,"content":""}' % _encode(self._role)
        return self._token_prefix[: self._lead_len] + role + _ROLE_TAIL

    def _text_into(self, buf: bytearray, text: str) -> None:
        try:
            _encode_into(text, buf, -1)
        except UnicodeEncodeError:  # lone surrogates: leaves buf as it was
            _encode_into(_scrub(text), buf, -1)

    def token_chunk_into(
        self, buf: bytearray, text: str, logprobs: list[Logprobs] | None = None
    ) -> None:
        """Append one SSE event carrying `text` (and its tokens' logprobs) to `buf`."""
        buf += self._token_prefix
        self._text_into(buf, text)
        fmt = self._logprobs
        if fmt is None or logprobs is None:
            buf += self._token_suffix
            return
        buf += self._token_text_end
        _encode_into(fmt(logprobs), buf, -1)
        buf += self._lp_end

    def _delta_into(self, buf: bytearray, delta: dict[str, Any]) -> None:
        start = len(buf)
        try:
            _encode_into(delta, buf, -1)
        except UnicodeEncodeError:  # lone surrogates (what was written of the delta goes)
            del buf[start:]
            _encode_into(_scrub_all(delta), buf, -1)

    def delta_chunk_into(
        self, buf: bytearray, delta: dict[str, Any], logprobs: list[Logprobs] | None = None
    ) -> None:
        """Append one chat SSE event whose `delta` is `delta` (a parsed answer's piece), with
        its tokens' logprobs."""
        buf += memoryview(self._token_prefix)[: self._lead_len]
        buf += b'"delta":'
        self._delta_into(buf, delta)
        fmt = self._logprobs
        if fmt is None or logprobs is None:
            buf += b',"logprobs":null'
        else:
            buf += b',"logprobs":'
            _encode_into(fmt(logprobs), buf, -1)
        buf += self._lp_end

    def finish_chunk_into(
        self,
        buf: bytearray,
        finish_reason: str,
        last: Last | None = None,
        fingerprint: bool = True,
    ) -> None:
        """Append the event that ends the choice with `finish_reason`, carrying `last` (what
        the engine's final step added, as vLLM sends it in that event); `fingerprint`: it is
        the stream's last event (no usage follows)."""
        buf += memoryview(self._token_prefix)[: self._lead_len]
        text = last.text if last is not None else ""
        if self._chat:
            buf += b'"delta":'
            if last is not None and last.delta is not None:
                self._delta_into(buf, last.delta)
            elif last is None or last.parsed:
                buf += b"{}"
            else:
                buf += b'{"content":'
                self._text_into(buf, text)
                buf += b"}"
        else:
            buf += b'"text":'
            self._text_into(buf, text)
        fmt = self._logprobs
        if fmt is None or last is None or last.logprobs is None:
            buf += b',"logprobs":null'
        else:
            buf += b',"logprobs":'
            _encode_into(fmt(last.logprobs), buf, -1)
        buf += b',"finish_reason":'
        _encode_into(finish_reason, buf, -1)
        buf += b',"stop_reason":'
        _encode_into(last.stop_reason if last is not None else None, buf, -1)
        buf += self._choice_end
        if fingerprint:
            buf += self._fingerprint
        buf += b"}\n\n"

    def usage_chunk_into(self, buf: bytearray, usage: Usage) -> None:
        """Append the usage event (``"choices": []``, as with stream_options.include_usage):
        the stream's last."""
        buf += memoryview(self._token_prefix)[: self._head_len]
        buf += b'[],"usage":'
        _encode_into(_stream_usage(usage), buf, -1)
        buf += self._fingerprint
        buf += b"}\n\n"

    @staticmethod
    def error_event(message: str, type: str, code: int) -> bytes:
        """An SSE event carrying an error that happened after the stream started."""
        err = {"error": {"message": message, "type": type, "param": None, "code": code}}
        return b"data: " + _encode(err) + b"\n\n"


class Last(msgspec.Struct):
    """What a choice's final step added, sent in the event with its finish reason (as vLLM
    sends it): its text, its parsed delta (`parsed`: the answer was parsed, `delta` None: the
    step added nothing to show), its logprobs and the stop string that ended it."""

    text: str = ""
    delta: dict[str, Any] | None = None
    parsed: bool = False
    logprobs: list[Logprobs] | None = None
    stop_reason: str | None = None


class Choice(msgspec.Struct, frozen=True):
    """One choice of a non-streaming answer."""

    text: str
    finish_reason: str
    logprobs: dict[str, Any] | None = None
    message: dict[str, Any] | None = None  # a chat answer's parsed message (tools, reasoning)
    role: str = "assistant"  # a chat answer's (the message's it continues, template.py)


def encode_chat_completion(
    request_id: str, model: str, created: int, choices: list[Choice], usage: Usage
) -> bytes:
    """The body of a non-streaming chat completion (``"object": "chat.completion"``);
    `message` replaces the one of `text` (an answer its engine parsed)."""
    return _encode(
        {
            "id": "chatcmpl-" + request_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": c.message or {"role": c.role, "content": c.text},
                    "logprobs": c.logprobs,
                    "finish_reason": c.finish_reason,
                }
                for i, c in enumerate(choices)
            ],
            "usage": _usage(usage),
        }
    )


def encode_completion(
    request_id: str, model: str, created: int, choices: list[Choice], usage: Usage
) -> bytes:
    """The body of a non-streaming text completion (``"object": "text_completion"``)."""
    return _encode(
        {
            "id": "cmpl-" + request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "text": c.text,
                    "logprobs": c.logprobs,
                    "finish_reason": c.finish_reason,
                }
                for i, c in enumerate(choices)
            ],
            "usage": _usage(usage),
        }
    )


def error_body(err: GatewayError) -> bytes:
    """The OpenAI-style error body for `err`; its HTTP status is `err.status`."""
    return _encode(
        {
            "error": {
                "message": err.message,
                "type": err.type,
                "param": err.param,
                "code": err.status,
            }
        }
    )
