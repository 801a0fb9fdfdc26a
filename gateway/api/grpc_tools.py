"""Tools in the public gRPC API (gateway.proto): a GenerateRequest's tools and conversation as
the OpenAI API's (the same checks and errors), and a parsed answer's pieces in its responses."""

from __future__ import annotations

import json
from typing import Any

from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import parsed
from shardgate.v1.params import Message, ToolCall, Tools

from gateway.api.openai.tools import tools_of
from gateway.types import InvalidRequest


def _tool(i: int, t: pb.Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": t.name}
    if t.description:
        function["description"] = t.description
    if t.parameters:
        try:
            function["parameters"] = json.loads(t.parameters)
        except json.JSONDecodeError:
            raise InvalidRequest(
                f"tools[{i}].parameters must be a JSON schema (JSON text)",
                f"tools[{i}].parameters",
            ) from None
    return {"type": "function", "function": function}


def tools_of_request(m: pb.GenerateRequest) -> Tools | None:
    tools = [_tool(i, t) for i, t in enumerate(m.tools)] or None
    choice: Any = m.tool_choice or None
    if m.tool_choice_function:
        if choice not in (None, "function"):
            raise InvalidRequest(
                "tool_choice_function names a function: tool_choice must be unset or 'function'",
                "tool_choice",
            )
        choice = {"type": "function", "function": {"name": m.tool_choice_function}}
    elif choice == "function":
        raise InvalidRequest("tool_choice 'function' needs tool_choice_function", "tool_choice")
    parallel = m.parallel_tool_calls if m.HasField("parallel_tool_calls") else None
    if tools is not None and m.WhichOneof("input") != "chat":
        raise InvalidRequest("tools are for chat requests", "tools")
    return tools_of(tools, choice, parallel)


def message_of(x: pb.Message) -> Message:
    calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in x.tool_calls)
    call_id = x.tool_call_id if x.HasField("tool_call_id") else None
    return Message(x.role, x.content, calls, call_id)


def fill_parsed(out: pb.GenerateResponse, p: parsed.Parsed) -> None:
    m = out.parsed
    if p.content is not None:
        m.content = p.content
    if p.reasoning is not None:
        m.reasoning = p.reasoning
    for c in p.tool_calls:
        d = m.tool_calls.add(index=c.index)
        if c.id is not None:
            d.id = c.id
        if c.name is not None:
            d.name = c.name
        if c.arguments is not None:
            d.arguments = c.arguments
