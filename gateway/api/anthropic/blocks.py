"""A Messages conversation's content blocks as the core's messages, as vLLM's Anthropic server
maps them onto a chat conversation: an assistant's text blocks are its content and its
`tool_use` blocks (id, name, input) its tool calls (the input as JSON text); a user's
`tool_result` blocks (tool_use_id, content) are tool messages answering those calls, before
the user's own text. Errors name the block's field, e.g. ``"messages[1].content[0].input"``."""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
from shardgate.v1.params import ToolCall

from gateway.api.openai.validation import bad, not_served
from gateway.types import InvalidRequest, Message

__all__ = ["Block", "assistant_message", "text_of", "user_messages"]

# Blocks of Anthropic's own server tools (web search, code execution): not served.
SERVER_BLOCKS: Final = frozenset({"server_tool_use", "web_search_tool_result"})


class Block(msgspec.Struct):
    """One content block: text (its `cache_control` is accepted: the engines' prefix cache
    needs no hint), an assistant's tool_use, or a user's tool_result."""

    type: str
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: dict[str, Any] | None = None  # tool_use
    tool_use_id: str | None = None  # tool_result
    content: str | list[Block] | None = None  # tool_result
    is_error: bool | None = None  # tool_result (accepted, as vLLM does: the text says it)


def _required(value: str | None, param: str) -> str:
    if not value:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param)
    return value


def _text(block: Block, param: str) -> str:
    if block.type in SERVER_BLOCKS:
        raise not_served(f"{param}.type", f"{block.type} blocks: server tools are not served")
    if block.type != "text":
        raise bad(f"{param}.type", f"only 'text' blocks are supported here, got {block.type!r}")
    if block.text is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.text'.", f"{param}.text")
    return block.text


def text_of(blocks: list[Block], field: str) -> str:
    """Text blocks joined with newlines, as the chat edge joins text parts."""
    return "\n".join([_text(b, f"{field}[{j}]") for j, b in enumerate(blocks)])


def _call(block: Block, param: str) -> ToolCall:
    id_ = _required(block.id, f"{param}.id")
    name = _required(block.name, f"{param}.name")
    if block.input is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.input'.", f"{param}.input")
    return ToolCall(id_, name, json.dumps(block.input))  # (the JSON text vLLM's server writes)


def assistant_message(blocks: list[Block], field: str) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        param = f"{field}[{j}]"
        if block.type == "tool_use":
            calls.append(_call(block, param))
        elif block.type == "tool_result":
            raise bad(f"{param}.type", "tool_result blocks belong in a user message")
        else:
            texts.append(_text(block, param))
    return Message("assistant", "\n".join(texts), tuple(calls))


def _result(block: Block, param: str) -> Message:
    call_id = _required(block.tool_use_id, f"{param}.tool_use_id")
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = text_of(content, f"{param}.content")
    return Message("tool", text, tool_call_id=call_id)


def user_messages(blocks: list[Block], field: str) -> list[Message]:
    """A user's turn: a tool message per tool_result, then the user's text, if any (or if
    there is nothing else)."""
    out: list[Message] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        param = f"{field}[{j}]"
        if block.type == "tool_result":
            out.append(_result(block, param))
        elif block.type == "tool_use":
            raise bad(f"{param}.type", "tool_use blocks belong in an assistant message")
        else:
            texts.append(_text(block, param))
    if texts or not out:
        out.append(Message("user", "\n".join(texts)))
    return out
