"""A chat request's `tools`, `tool_choice` and `parallel_tool_calls` as the one `Tools` of its
engine parameters, checked as vLLM's OpenAI server checks them (the same errors); and the
tool calls of the conversation's assistant messages."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from shardgate.v1.params import ToolCall, Tools

from gateway.api.openai.validation import bad
from gateway.types import InvalidRequest

_CORRECT_USAGE: Final = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


class FunctionCallParam(msgspec.Struct):
    name: str
    arguments: str


class ToolCallParam(msgspec.Struct):
    """One of an assistant message's `tool_calls`."""

    id: str
    function: FunctionCallParam
    type: str = "function"


def _names(tools: list[Any]) -> list[str]:
    names = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad(
                f"tools[{i}]", 'must be an object like {"type": "function", "function": {...}}'
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise bad(f"tools[{i}].function", "must be an object with a 'name'")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"tools[{i}].function.name", "must be a non-empty string")
        params = function.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON schema (an object)")
        names.append(name)
    return names


def _named(choice: dict[str, Any], names: list[str]) -> str:
    function = choice.get("function")
    if not isinstance(function, dict):
        raise InvalidRequest(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {_CORRECT_USAGE}",
            "tool_choice.function",
        )
    if "name" not in function:
        raise InvalidRequest(
            f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_USAGE}",
            "tool_choice.function.name",
        )
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {_CORRECT_USAGE}",
            "tool_choice.function.name",
        )
    if name not in names:
        raise InvalidRequest(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        )
    return name


def tools_of(
    tools: list[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None
) -> Tools | None:
    """The request's tools (None: it has none and asks for no tool call)."""
    if tools is not None and not tools:
        raise InvalidRequest(
            "`tools` must not be an empty array. Either provide at least one tool or omit "
            "the field entirely.",
            "tools",
        )
    if tools is None:
        if tool_choice is None or tool_choice == "none":
            return None
        raise InvalidRequest("When using `tool_choice`, `tools` must be set.", "tool_choice")
    names = _names(tools)
    text = msgspec.json.encode(tools).decode()
    parallel = parallel_tool_calls
    if tool_choice is None or tool_choice in ("none", "auto", "required"):
        choice = "auto" if tool_choice is None else tool_choice
        return Tools(tools=text, choice=choice, parallel_tool_calls=parallel)
    if isinstance(tool_choice, dict):
        name = _named(tool_choice, names)
        return Tools(tools=text, choice="function", function=name, parallel_tool_calls=parallel)
    raise InvalidRequest(
        f'Invalid value for `tool_choice`: {tool_choice}! Only named tools, "none", '
        '"auto" or "required" are supported.',
        "tool_choice",
    )


def tool_calls_of(calls: list[ToolCallParam] | None, i: int) -> tuple[ToolCall, ...]:
    """An assistant message's tool calls (functions only, as vLLM takes them)."""
    if not calls:
        return ()
    for j, c in enumerate(calls):
        if c.type != "function":
            raise bad(f"messages[{i}].tool_calls[{j}].type", "only 'function' is supported")
    return tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in calls)
