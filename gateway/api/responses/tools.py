"""A Responses request's function tools and tool_choice as the core's `Tools` (through the chat
edge's checks: the same errors as vLLM's), and its function_call / function_call_output input
items as the conversation's tool calls and tool messages."""

from __future__ import annotations

from typing import Any

from shardgate.v1.params import ToolCall, Tools

from gateway.api.openai.tools import tools_of as chat_tools_of
from gateway.api.openai.validation import bad, not_served
from gateway.types import InvalidRequest, Message

__all__ = ["function_call", "function_output", "tools_of"]

_FUNCTION_FIELDS = ("name", "description", "parameters", "strict")


def _chat_tool(i: int, tool: Any) -> dict[str, Any]:
    """One Responses function tool (flat) as a chat tool (nested under `function`)."""
    if not isinstance(tool, dict):
        raise bad(f"tools[{i}]", 'must be an object like {"type": "function", "name": "..."}')
    if tool.get("type") != "function":
        raise not_served(f"tools[{i}].type", "only function tools are served")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise bad(f"tools[{i}].name", "must be a non-empty string")
    function = {k: tool[k] for k in _FUNCTION_FIELDS if tool.get(k) is not None}
    return {"type": "function", "function": function}


def _chat_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise not_served("tool_choice", 'only "none", "auto", "required" or a function are served')


def tools_of(tools: list[Any] | None, choice: Any, parallel: bool | None) -> Tools | None:
    """The request's tools (None: it has none and asks for no call)."""
    chat = None if tools is None else [_chat_tool(i, t) for i, t in enumerate(tools)]
    if not chat and choice in (None, "auto", "none"):
        return None
    return chat_tools_of(chat, _chat_choice(choice), parallel)


def _required(value: str | None, field: str) -> str:
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{field}'.", field)
    return value


def function_call(
    out: list[Message], field: str, call_id: str | None, name: str | None, args: str | None
) -> None:
    """A call the assistant made: onto its message just before, or a message of its own."""
    call = ToolCall(
        _required(call_id, f"{field}.call_id"),
        _required(name, f"{field}.name"),
        _required(args, f"{field}.arguments"),
    )
    if out and out[-1].role == "assistant":
        last = out[-1]
        out[-1] = Message("assistant", last.content, (*last.tool_calls, call))
    else:
        out.append(Message("assistant", "", (call,)))


def function_output(field: str, call_id: str | None, output: str | None) -> Message:
    """A call's result, as the tool message that answers it."""
    call = _required(call_id, f"{field}.call_id")
    return Message("tool", _required(output, f"{field}.output"), tool_call_id=call)
