"""Verifies one OpenAI streamed response from its raw body bytes, as they arrive.

Checked: the HTTP status and content type, SSE framing (events separated by a blank line,
`data:` lines), every chunk parses as a JSON object, no error event, the finish reason, the usage
chunk (present, and prompt + completion == total), the number of content chunks ==
usage.completion_tokens, the `data: [DONE]` terminator with nothing after it, and, with
ignore_eos, completion_tokens == max_tokens.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import orjson

from bench import result as kinds
from bench.result import TokenClock

_FIELDS: Final = (b"event:", b"id:", b"retry:")
MAX_EVENT_BYTES: Final = 1 << 20
MAX_DETAIL: Final = 300


class SseVerifier:
    __slots__ = (
        "_err_body",
        "_ignore",
        "_kind",
        "_rest",
        "clock",
        "detail",
        "done",
        "errors",
        "expect_tokens",
        "finish_reason",
        "status",
        "usage",
    )

    def __init__(
        self, kind: Literal["chat", "completions"], expect_tokens: int | None, start: float
    ) -> None:
        self._kind = kind
        self._rest = b""
        self._err_body = b""
        self.detail = ""
        self._ignore = False
        self.status = 0
        self.expect_tokens = expect_tokens
        self.clock = TokenClock(start)
        self.done = False
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.errors: list[str] = []

    @property
    def tokens(self) -> int:
        return self.clock.tokens

    def head(self, status: int, headers: dict[str, str]) -> None:
        """The response head: anything but 200 and an event stream is an error."""
        self.status = status
        if status != 200:
            kind = kinds.http_status(status)
            if status in (429, 503) and "retry-after" not in headers:
                kind += kinds.NO_RETRY_AFTER  # (a refusal that does not say when to retry)
            self._fail(kind)
            self._ignore = True
        elif not headers.get("content-type", "").startswith("text/event-stream"):
            self._fail(kinds.CONTENT_TYPE, headers.get("content-type", ""))
            self._ignore = True

    def _fail(self, kind: str, detail: str = "") -> None:
        self.errors.append(kind)
        if detail and not self.detail:
            self.detail = f"{kind}: {detail[:MAX_DETAIL]}"

    def feed(self, data: bytes, now: float) -> None:
        if self._ignore:
            if self.status != 200 and len(self._err_body) < MAX_DETAIL:
                self._err_body += data[:MAX_DETAIL]
            return
        if self._rest:
            data = self._rest + data
        events = data.split(b"\n\n")
        self._rest = events.pop()
        if len(self._rest) > MAX_EVENT_BYTES:
            self._fail(kinds.SSE_FRAMING, f"an event over {MAX_EVENT_BYTES} bytes")
            self._ignore = True
            return
        for event in events:
            self._event(event, now)

    def _event(self, event: bytes, now: float) -> None:
        if event.startswith(b"data: ") and b"\n" not in event:
            payload: bytes | None = event[6:]
        else:
            payload = self._data_of(event)
        if payload is None:
            return
        if self.done:
            self._fail(kinds.SSE_FRAMING, f"after [DONE]: {payload[:80]!r}")
            return
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self._fail(kinds.BAD_JSON, repr(payload[:120]))
            return
        if not isinstance(chunk, dict):
            self._fail(kinds.BAD_JSON, repr(payload[:120]))
            return
        self._chunk(chunk, now)

    def _data_of(self, event: bytes) -> bytes | None:
        """The data of a general SSE event; None for a comment-only event."""
        data: list[bytes] = []
        for line in event.split(b"\n"):
            line = line.removesuffix(b"\r")
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif line.startswith(b":") or line.startswith(_FIELDS):
                continue
            else:
                self._fail(kinds.SSE_FRAMING, repr(line[:80]))
                return None
        return b"\n".join(data) if data else None

    def _chunk(self, chunk: dict[str, Any], now: float) -> None:
        if "error" in chunk:
            err = chunk["error"]
            self._fail(kinds.ERROR_EVENT, str(err.get("message") if isinstance(err, dict) else err))
            return
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            self._fail(kinds.BAD_JSON, "no choices list")
            return
        usage = chunk.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                self._fail(kinds.BAD_JSON, "usage is not an object")
            else:
                self.usage = usage
        if not choices:
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            self._fail(kinds.BAD_JSON, "choices[0] is not an object")
            return
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = finish
        if self._kind == "chat":
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                self._fail(kinds.BAD_JSON, "no delta object")
                return
            content = delta.get("content")
            # The first chunk carries the role with content "": not a token.
            counted = isinstance(content, str) and (bool(content) or "role" not in delta)
        else:
            text = choice.get("text")
            counted = isinstance(text, str) and (bool(text) or finish is None)
        if counted:
            self.clock.tick(now)

    def finish(self, body_complete: bool) -> list[str]:
        """The error kinds of the stream; `body_complete`: the HTTP body ended properly."""
        if self._err_body:
            self.detail = f"{self.errors[0]}: {self._err_body.decode(errors='replace')}"  # body
        if self._ignore or kinds.ERROR_EVENT in self.errors:
            return self.errors
        if not body_complete:
            self._fail(kinds.TRUNCATED, f"after {self.clock.tokens} tokens")
            return self.errors
        if self._rest.strip():
            self._fail(kinds.SSE_FRAMING, f"unterminated event {self._rest[:80]!r}")
        if not self.done:
            self._fail(kinds.MISSING_DONE)
        if self.finish_reason is None:
            self._fail(kinds.MISSING_FINISH)
        usage = self.usage
        if usage is None:
            self._fail(kinds.MISSING_USAGE)
            return self.errors
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        total = usage.get("total_tokens")
        if not (isinstance(prompt, int) and isinstance(completion, int) and isinstance(total, int)):
            self._fail(kinds.BAD_JSON, f"usage {usage}")
            return self.errors
        if prompt + completion != total:
            self._fail(kinds.USAGE_SUM, f"{prompt} + {completion} != {total}")
        if completion != self.clock.tokens:
            self._fail(kinds.TOKEN_COUNT, f"{self.clock.tokens} chunks, {completion} in usage")
        if self.expect_tokens is not None and completion != self.expect_tokens:
            self._fail(kinds.MAX_TOKENS, f"{completion} tokens, max_tokens {self.expect_tokens}")
        return self.errors

    @property
    def prompt_tokens(self) -> int:
        p = self.usage.get("prompt_tokens") if self.usage else None
        return p if isinstance(p, int) else 0
