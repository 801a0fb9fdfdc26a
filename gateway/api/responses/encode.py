"""The Response object and the Responses API's streaming events, as bytes.

A response's state (`ResponseState`) is kept by its run and read by whoever asks (the answer,
a retrieve, the events). A stream is, each event numbered by `sequence_number` from 0:
response.created, response.in_progress, response.output_item.added (one assistant message),
response.content_part.added (one output_text part), response.output_text.delta per engine
delta, response.output_text.done, response.content_part.done, response.output_item.done, and
then per function call the model made (tools) output_item.added, one
response.function_call_arguments.delta with its arguments, .done and output_item.done; and
response.completed (its status "incomplete" when max_output_tokens ended it, as vLLM says it);
or response.failed when the generation failed. Each is an `event:` line and a `data:` line.
"""

from __future__ import annotations

import time
from typing import Any, Final, Literal

import msgspec
from shardgate.v1.parsed import Parsed, ToolCallDelta

from gateway.types import Finish, GatewayError, Usage

__all__ = ["Events", "ResponseState", "Status", "encode_response"]

Status = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
FINAL: Final = frozenset({"completed", "incomplete", "failed", "cancelled"})

_encode: Final = msgspec.json.Encoder().encode


def _scrub(text: str) -> str:
    """`text` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class ResponseState:
    """One response as it stands: what was asked (echoed), its status and output so far."""

    __slots__ = (
        "background",
        "calls",
        "completed_at",
        "created_at",
        "error",
        "id",
        "instructions",
        "max_output_tokens",
        "message_id",
        "metadata",
        "model",
        "previous_response_id",
        "status",
        "store",
        "temperature",
        "text",
        "texts",
        "tool_choice",
        "tools",
        "top_p",
        "usage",
    )

    def __init__(
        self,
        id: str,
        model: str,
        *,
        background: bool = False,
        store: bool = True,
        instructions: str | None = None,
        metadata: dict[str, Any] | None = None,
        previous_response_id: str | None = None,
        max_output_tokens: int = 0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        text: dict[str, Any] | None = None,
        tools: list[Any] | None = None,
        tool_choice: Any = None,
    ) -> None:
        self.id = id
        self.message_id = "msg_" + id.removeprefix("resp_")
        self.model = model
        self.background = background
        self.store = store
        self.instructions = instructions
        self.metadata = metadata or {}
        self.previous_response_id = previous_response_id
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.text = text or {"format": {"type": "text"}}
        self.tools = tools or []
        self.tool_choice = tool_choice or ("auto" if tools else "none")
        self.calls: dict[int, list[str]] = {}  # index -> [call id, name, arguments]
        self.created_at = int(time.time())
        self.completed_at: int | None = None
        self.status: Status = "queued" if background else "in_progress"
        self.texts: list[str] = []
        self.usage: Usage | None = None
        self.error: dict[str, str] | None = None

    @property
    def output_text(self) -> str:
        return "".join(self.texts)

    def add_call(self, c: ToolCallDelta) -> None:
        """A piece of the function call at `c.index`: its id and name first, then arguments."""
        call = self.calls.setdefault(c.index, [c.id or f"call_{c.index}", c.name or "", ""])
        if c.name and not call[1]:
            call[1] = c.name
        if c.arguments:
            call[2] += c.arguments

    def whole(self, p: Parsed) -> None:
        """The whole answer as its engine parsed it, instead of what was said so far."""
        self.texts = [p.content] if p.content else []
        self.calls = {}
        for c in p.tool_calls:
            self.add_call(c)

    def call_item(self, index: int, done: bool) -> dict[str, Any]:
        call_id, name, arguments = self.calls[index]
        return {
            "id": f"fc_{self.id.removeprefix('resp_')}_{index}",
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": arguments if done else "",
            "status": "completed" if done else "in_progress",
        }

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def finish(self, finish: Finish, usage: Usage) -> None:
        self.status = "incomplete" if finish is Finish.LENGTH else "completed"
        self.usage = usage
        self.completed_at = int(time.time())

    def fail(self, err: GatewayError, usage: Usage | None) -> None:
        self.status = "failed"
        self.usage = usage
        self.error = {
            "code": "server_error" if err.status >= 500 else err.type,
            "message": err.message,
        }

    def cancel(self) -> None:
        if not self.final:
            self.status = "cancelled"

    # -- as the API says it ------------------------------------------------------------------
    def part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": _scrub(self.output_text), "annotations": []}

    def item(self, done: bool) -> dict[str, Any]:
        """The assistant message (its text part once there is text, or once it is done)."""
        status = "in_progress"
        if done:
            status = "incomplete" if self.status == "incomplete" else "completed"
        content = [self.part()] if done or self.texts else []
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def body(self, with_output: bool = True) -> dict[str, Any]:
        """The Response object."""
        out: list[dict[str, Any]] = []
        if with_output:
            if self.texts or (self.final and not self.calls):
                out.append(self.item(done=self.final))
            out += [self.call_item(i, self.final) for i in sorted(self.calls)]
        usage = self.usage
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "background": self.background,
            "store": self.store,
            "model": self.model,
            "instructions": self.instructions,
            "metadata": self.metadata,
            "previous_response_id": self.previous_response_id,
            "output": out,
            "error": self.error,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if self.status == "incomplete" else None
            ),
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "text": self.text,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": True,
            "truncation": "disabled",
            "service_tier": "auto",
            "usage": None if usage is None else _usage(usage),
        }


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def encode_response(state: ResponseState) -> bytes:
    return _encode(state.body())


class Events:
    """Renders one response's streaming events, numbered from `seq` (0 for a new stream)."""

    __slots__ = ("message", "pending", "seq", "state")

    def __init__(self, state: ResponseState) -> None:
        self.state = state
        self.message = False  # the assistant message's item was opened
        self.seq = 0
        self.pending: list[tuple[int, bytes]] = []  # (sequence number, the event's bytes)

    def take(self) -> list[tuple[int, bytes]]:
        out, self.pending = self.pending, []
        return out

    def _add(self, kind: str, fields: dict[str, Any]) -> None:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.pending.append((self.seq, b"event: %s\ndata: %s\n\n" % (kind.encode(), _encode(data))))
        self.seq += 1

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.state.message_id, "output_index": 0, "content_index": 0}

    def start(self) -> None:
        body = self.state.body(with_output=False)
        self._add("response.created", {"response": body})
        self._add("response.in_progress", {"response": body | {"status": "in_progress"}})

    def open(self) -> None:
        """The assistant message and its text part begin."""
        self.message = True
        self._add("response.output_item.added", {"output_index": 0, "item": self.state.item(False)})
        part = {"type": "output_text", "text": "", "annotations": []}
        self._add("response.content_part.added", self._at() | {"part": part})

    def delta(self, text: str) -> None:
        self._add(
            "response.output_text.delta", self._at() | {"delta": _scrub(text), "logprobs": []}
        )

    def close(self) -> None:
        """The text part and the message end (the state has its final status)."""
        s = self.state
        self._add(
            "response.output_text.done",
            self._at() | {"text": _scrub(s.output_text), "logprobs": []},
        )
        self._add("response.content_part.done", self._at() | {"part": s.part()})
        self._add("response.output_item.done", {"output_index": 0, "item": s.item(True)})

    def calls(self) -> None:
        """Each function call, whole (after the message, if there is one)."""
        s = self.state
        for k, index in enumerate(sorted(s.calls), start=int(self.message)):
            item = s.call_item(index, done=True)
            at = {"item_id": item["id"], "output_index": k}
            self._add(
                "response.output_item.added", {"output_index": k, "item": s.call_item(index, False)}
            )
            self._add("response.function_call_arguments.delta", at | {"delta": item["arguments"]})
            done = {"arguments": item["arguments"], "name": item["name"]}
            self._add("response.function_call_arguments.done", at | done)
            self._add("response.output_item.done", {"output_index": k, "item": item})

    def end(self) -> None:
        """The last event: response.completed, or response.failed."""
        s = self.state
        kind = "response.failed" if s.status == "failed" else "response.completed"
        self._add(kind, {"response": s.body()})
