"""A Messages request's `tools` and `tool_choice` as the core's one `Tools`, and the engine's
parsed tool calls as Anthropic's `tool_use` blocks, as vLLM's Anthropic server maps them.

Request: each tool (name, description, input_schema) is a chat function (its parameters the
input schema); tool_choice auto -> "auto", any -> "required", tool -> the named function,
none -> "none"; `disable_parallel_tool_use` -> parallel_tool_calls false. The chat edge's
checks apply to the result (the same errors). Answer: a call's id is ``toolu_`` and the
engine's id, its input the arguments' JSON object.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import msgspec
from shardgate.v1 import parsed
from shardgate.v1.params import Tools

from gateway.api.openai import tools as chat_tools
from gateway.api.openai.validation import bad, not_served

__all__ = ["input_of", "tool_use_id", "tool_uses", "tools_of"]

CHOICES: Final = {"auto": "auto", "any": "required", "none": "none"}
_ENGINE_PREFIX: Final = "chatcmpl-tool-"  # (vLLM's tool call ids)
_decode_json: Final = msgspec.json.decode


def _function(i: int, tool: Any) -> dict[str, Any]:
    param = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise bad(param, 'must be a tool object like {"name": "f", "input_schema": {...}}')
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise not_served(f"{param}.type", f"{kind!r} tools: server tools are not served")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise bad(f"{param}.name", "must be a non-empty string")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise bad(f"{param}.input_schema", "must be a JSON schema (an object)")
    function: dict[str, Any] = {"name": name, "parameters": schema}
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise bad(f"{param}.description", "must be a string")
        function["description"] = description
    return {"type": "function", "function": function}


def _choice(choice: dict[str, Any] | None) -> tuple[Any, bool | None]:
    """The chat tool_choice and parallel_tool_calls of Anthropic's tool_choice."""
    if choice is None:
        return None, None
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad("tool_choice.disable_parallel_tool_use", "must be a boolean")
    parallel = None if disable is None else not disable
    kind = choice.get("type")
    if kind in CHOICES:
        return CHOICES[kind], parallel
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise bad("tool_choice.name", "must be the name of one of the tools")
        return {"type": "function", "function": {"name": name}}, parallel
    raise bad("tool_choice.type", "must be one of 'auto', 'any', 'tool', 'none'")


def tools_of(tools: list[Any] | None, tool_choice: dict[str, Any] | None) -> Tools | None:
    """The request's tools (None: it has none and asks for no tool call)."""
    functions = [_function(i, t) for i, t in enumerate(tools)] if tools else None
    choice, parallel = _choice(tool_choice)
    return chat_tools.tools_of(functions, choice, parallel)


def tool_use_id(engine_id: str | None) -> str:
    """A tool_use block's id for the engine's call id (a new one where it gave none)."""
    if not engine_id:
        return "toolu_" + uuid.uuid4().hex[:24]
    return "toolu_" + engine_id.removeprefix(_ENGINE_PREFIX)


def input_of(arguments: str | None) -> dict[str, Any]:
    """A call's input: its arguments' JSON object ({} where the model wrote none, or text
    that is not a JSON object: Anthropic's input is always an object)."""
    if not arguments:
        return {}
    try:
        value = _decode_json(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_uses(p: parsed.Parsed | None) -> list[dict[str, Any]]:
    """The tool_use blocks of an answer given whole."""
    if p is None:
        return []
    return [
        {
            "type": "tool_use",
            "id": tool_use_id(c.id),
            "name": c.name or "",
            "input": input_of(c.arguments),
        }
        for c in p.tool_calls
    ]
