"""Decoding and validation of Anthropic Messages bodies into `GenerationRequest`.

The bodies are those of POST /v1/messages and POST /v1/messages/count_tokens as the official
`anthropic` SDK sends them (its sampling fields, temperature, top_p and top_k, in the body as
the API takes them). Unknown fields are named, as the OpenAI edge names them (ignored with a
warning, or refused in Anthropic's words: gateway/policy/unknown_fields.py); known fields that
ask for something not served (server tools, images, extended thinking, effort, containers, an
assistant prefill) are refused with a 400 naming the field, never answered as if they had not
been asked. Tools, tool_choice and the tool_use / tool_result blocks are the core's tools
(tools.py, blocks.py), refused by name where the model's engines serve none.
`output_config.format` (a JSON schema) is the core's structured outputs, refused by name
where the model's engines cannot honour it.
Errors are `InvalidRequest`s whose `param` is the field's path, e.g.
``"messages[0].content[1].type"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from shardgate.v1.params import Structured, Tools

from gateway.api.anthropic.blocks import Block, assistant_message, text_of, user_messages
from gateway.api.anthropic.tools import tools_of
from gateway.api.openai.validation import INT32_MAX, BodyDecoder, bad, decode_json, not_served
from gateway.types import GenerationRequest, Message, Sampling

__all__ = [
    "Block",
    "CountTokensRequest",
    "MessagesRequest",
    "decode_count_tokens",
    "decode_messages",
    "messages_of",
]

_MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_TopK = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
_Model = Annotated[str, msgspec.Meta(min_length=1)]
MAX_STOP_SEQUENCES: Final = 16
_Stops = Annotated[list[str], msgspec.Meta(max_length=MAX_STOP_SEQUENCES)]
_Bias = Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]


class InputMessage(msgspec.Struct):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class JSONFormat(msgspec.Struct):
    type: Literal["json_schema"]
    schema: dict[str, Any]


class OutputConfig(msgspec.Struct):
    effort: str | None = None
    format: JSONFormat | None = None


class Metadata(msgspec.Struct):
    user_id: str | None = None  # accepted, without effect on the output


class _Prompt(msgspec.Struct, kw_only=True):
    """What both endpoints take: the model and the conversation."""

    model: _Model
    messages: Annotated[list[InputMessage], msgspec.Meta(min_length=1)]
    system: str | list[Block] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    # Not served: refused by name when they ask for something (None or empty passes).
    thinking: dict[str, Any] | None = None
    mcp_servers: list[Any] | None = None


class CountTokensRequest(_Prompt, kw_only=True):
    """The body of POST /v1/messages/count_tokens."""


class MessagesRequest(_Prompt, kw_only=True):
    """The body of POST /v1/messages."""

    max_tokens: _MaxTokens
    stop_sequences: _Stops | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    top_k: _TopK | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    output_config: OutputConfig | None = None
    container: Any = None
    # An extension (Anthropic's API has none): the chat API's {"token id": bias}.
    logit_bias: dict[str, _Bias] | None = None
    # Accepted, without effect on the output: cache_control (the engines' prefix cache needs
    # no hint), service_tier, speed, inference_geo, diagnostics.
    cache_control: Any = None
    service_tier: Any = None
    speed: Any = None
    inference_geo: Any = None
    diagnostics: Any = None


_COUNT: Final = msgspec.json.Decoder(CountTokensRequest)

_BLOCK = 'must be a content block object like {"type": "text", "text": "..."}'
# What each field must be, keyed by its path with list indices elided ("messages[].role").
EXPECTED: Final[dict[str, str]] = {
    "model": "must be a non-empty string",
    "messages": "must be a non-empty array of message objects",
    "messages[]": "must be a message object with a 'role' and a 'content'",
    "messages[].role": "must be one of 'user', 'assistant'",
    "messages[].content": "must be a string or an array of content blocks",
    "messages[].content[]": _BLOCK,
    "messages[].content[].type": "must be a string",
    "messages[].content[].text": "must be a string",
    "messages[].content[].id": "must be a string",
    "messages[].content[].name": "must be a string",
    "messages[].content[].input": "must be an object (the tool's input)",
    "messages[].content[].tool_use_id": "must be a string",
    "messages[].content[].content": "must be a string or an array of text blocks",
    "messages[].content[].content[]": _BLOCK,
    "messages[].content[].content[].type": "must be a string",
    "messages[].content[].content[].text": "must be a string",
    "messages[].content[].is_error": "must be a boolean",
    "system": "must be a string or an array of text blocks",
    "system[]": _BLOCK,
    "system[].type": "must be a string",
    "system[].text": "must be a string",
    "max_tokens": f"must be an integer greater than 0 (at most {INT32_MAX})",
    "stop_sequences": f"must be an array of at most {MAX_STOP_SEQUENCES} strings",
    "stop_sequences[]": "must be a string",
    "temperature": "must be a number between 0 and 1",
    "top_p": "must be a number greater than 0 and at most 1",
    "top_k": "must be an integer of at least 0 (0: off)",
    "metadata": 'must be an object like {"user_id": "..."}',
    "metadata.user_id": "must be a string",
    "stream": "must be a boolean",
    "output_config": 'must be an object like {"format": {"type": "json_schema", "schema": {}}}',
    "output_config.effort": "must be a string",
    "output_config.format": 'must be an object like {"type": "json_schema", "schema": {}}',
    "output_config.format.type": "must be 'json_schema'",
    "output_config.format.schema": "must be a JSON schema (an object)",
    "tools": "must be an array of tool definitions",
    "tool_choice": 'must be an object like {"type": "auto"}',
    "thinking": 'must be an object like {"type": "disabled"}',
    "mcp_servers": "must be an array",
    "logit_bias": "must be an object mapping token ids to numbers between -100 and 100",
}
_MESSAGES: Final = BodyDecoder(MessagesRequest, EXPECTED)


def _check_unserved(req: _Prompt) -> None:
    if req.thinking is not None and req.thinking.get("type") != "disabled":
        raise not_served("thinking", "extended thinking is not served")
    if req.mcp_servers:
        raise not_served("mcp_servers", "MCP servers are not served")


def messages_of(req: _Prompt) -> tuple[Message, ...]:
    """The conversation as the core's messages: the system prompt first, if any."""
    _check_unserved(req)
    out: list[Message] = []
    if req.system:
        system = req.system if isinstance(req.system, str) else text_of(req.system, "system")
        out.append(Message("system", system))
    for i, m in enumerate(req.messages):
        content = m.content
        field = f"messages[{i}].content"
        if isinstance(content, str):
            out.append(Message(m.role, content))
        elif m.role == "assistant":
            out.append(assistant_message(content, field))
        else:
            out.extend(user_messages(content, field))
    last = len(req.messages) - 1
    if req.messages[last].role == "assistant":
        # The engine's chat template always opens a new assistant turn: it cannot continue one.
        raise not_served(f"messages[{last}].role", "a final assistant message (prefill)")
    return tuple(out)


def _stops(stops: list[str] | None) -> tuple[str, ...]:
    if not stops:
        return ()
    for i, stop in enumerate(stops):
        if not stop:
            raise bad(f"stop_sequences[{i}]", "stop sequences must not be empty")
    return tuple(stops)


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    """The chat API's {"token id": bias}; the keys must be token ids."""
    if not bias:
        return None
    for key in bias:
        if not key.isdigit() or int(key) > INT32_MAX:
            raise bad("logit_bias", f"{key!r} is not a token id")
    return {int(key): value for key, value in bias.items()}


def _structured(req: MessagesRequest) -> Structured | None:
    config = req.output_config
    if config is None:
        return None
    if config.effort is not None:
        raise not_served("output_config.effort", "the model answers as it is")
    if config.format is None:
        return None
    schema = msgspec.json.encode(config.format.schema).decode()
    return Structured(field="output_config.format", json=schema)


def decode_messages(body: bytes, request_id: str) -> GenerationRequest:
    """Decode and validate a POST /v1/messages body. Raises `InvalidRequest`."""
    req, unknown = _MESSAGES.decode(body)
    messages = messages_of(req)
    if req.container is not None:
        raise not_served("container", "code execution containers are not served")
    sampling = Sampling(
        max_tokens=req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        stop=_stops(req.stop_sequences),
        structured=_structured(req),
        logit_bias=_logit_bias(req.logit_bias),
    )
    out = GenerationRequest(
        request_id=request_id,
        model=req.model,
        sampling=sampling,
        messages=messages,
        stream=bool(req.stream),
    )
    out.generation.tools = tools_of(req.tools, req.tool_choice)
    out.unknown_fields = unknown
    return out


def decode_count_tokens(body: bytes) -> tuple[str, tuple[Message, ...], Tools | None]:
    """The model, the conversation and the tools of a POST /v1/messages/count_tokens body."""
    req = decode_json(_COUNT, body, EXPECTED)
    return req.model, messages_of(req), tools_of(req.tools, req.tool_choice)
