"""A chat answer that its engine parsed (tool calls, reasoning), as its deltas bring it: what
each streamed chunk says, the whole message of an answer given whole, and the finish reason,
as vLLM's OpenAI server gives them."""

from __future__ import annotations

from typing import Any

import msgspec
from shardgate.v1 import parsed
from shardgate.v1.params import Tools


def delta_of(p: parsed.Parsed) -> dict[str, Any] | None:
    """A streamed chunk's `delta` (None: this step added nothing to say)."""
    out: dict[str, Any] = {}
    if p.content is not None:
        out["content"] = p.content
    if p.reasoning is not None:
        out["reasoning"] = p.reasoning
    if p.tool_calls:
        out["tool_calls"] = [_call_delta(c) for c in p.tool_calls]
    return out or None


def _call_delta(c: parsed.ToolCallDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"index": c.index}
    if c.id is not None:
        out["id"] = c.id
        out["type"] = "function"
    function: dict[str, str] = {}
    if c.name is not None:
        function["name"] = c.name
    if c.arguments is not None:
        function["arguments"] = c.arguments
    if function:
        out["function"] = function
    return out


def message_of(p: parsed.Parsed, role: str = "assistant") -> dict[str, Any]:
    """The `message` of an answer given whole."""
    out: dict[str, Any] = {"role": role, "content": p.content, "reasoning": p.reasoning}
    if p.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments or ""},
            }
            for c in p.tool_calls
        ]
    return out


class Answer:
    """Follows one chat answer's parsed deltas."""

    __slots__ = ("_hide", "_tools", "called", "whole")

    def __init__(self, tools: Tools | None, hide_reasoning: bool = False) -> None:
        """`hide_reasoning`: chat's include_reasoning false (the reasoning is left out)."""
        self._tools = tools
        self._hide = hide_reasoning
        self.called = False  # a tool call was made
        self.whole: parsed.Parsed | None = None  # the last Parsed seen

    def add(self, data: bytes) -> parsed.Parsed:
        p = parsed.decode(data)
        if self._hide and p.reasoning is not None:
            p = msgspec.structs.replace(p, reasoning=None)
        if p.tool_calls:
            self.called = True
        self.whole = p
        return p

    def finish_reason(self, reason: str, whole: bool) -> str:
        """ "tool_calls" where vLLM says so. Given whole: with tool_choice "auto", whenever a
        tool was called (whatever ended the answer); with "required", when the model stopped
        on its own. Streamed: when the model stopped on its own after calling a tool. A named
        function: its own reason ("stop")."""
        t = self._tools
        if t is None or t.choice == "function":
            return reason
        if whole:
            if t.choice == "auto" and self.called:
                return "tool_calls"
            return "tool_calls" if t.choice == "required" and reason == "stop" else reason
        return "tool_calls" if self.called and reason == "stop" else reason
