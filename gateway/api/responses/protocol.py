"""Decoding and validation of POST /v1/responses bodies into the core's types.

The body as the official `openai` SDK's `responses.create` sends it, and as vLLM takes it
(its extensions: top_k, min_p, repetition_penalty, seed, stop, ignore_eos, ... in the extra
body). `input` is a string or a list of message items (roles user, assistant, system,
developer; content a string or input_text / output_text parts); `instructions` becomes a system
message first. Sampling fields are checked as the chat API checks them (the same bounds and
errors); `text.format` (json_schema, json_object) is the core's structured outputs. Known
fields that ask for what is not served here (tools other than functions, images, logprobs,
reasoning, prompt templates, conversations, truncation) are refused with a 400 naming the
field; unknown fields are named (gateway/policy/unknown_fields.py: ignored with a warning, as
vLLM ignores them, or refused). Function `tools` and `tool_choice` are the
core's tools (the engine's parser makes the calls); function_call and function_call_output
input items are the conversation's calls and their results.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from shardgate.v1.params import Structured, Tools

from gateway.api.openai.protocol import sampling_of
from gateway.api.openai.validation import INT32_MAX, BodyDecoder, bad, not_served
from gateway.api.responses.tools import function_call, function_output, tools_of
from gateway.types import GenerationRequest, InvalidRequest, Message, Sampling, UnknownFields

__all__ = ["Decoded", "ResponsesRequest", "decode_responses", "generation_request"]

_Model = Annotated[str, msgspec.Meta(min_length=1)]
_MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
_Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=INT32_MAX)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

# Sampling fields named as the chat API names them: checked by its decoder.
SAMPLING_FIELDS: Final = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "stop_token_ids",
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "min_tokens",
)
_TEXT_PARTS: Final = frozenset({"input_text", "output_text"})


class Part(msgspec.Struct):
    type: str
    text: str | None = None


class InputItem(msgspec.Struct, kw_only=True):
    """One item of `input`: a message (its `type` may be left out), a function call the
    assistant made, or its output."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[Part] | None = None
    call_id: str | None = None  # a function_call's and a function_call_output's
    name: str | None = None  # a function_call's
    arguments: str | None = None
    output: str | None = None  # a function_call_output's


class TextFormat(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str
    schema: dict[str, Any] | None = None
    name: str | None = None  # accepted, without effect
    strict: bool | None = None  # accepted: the schema is always followed


class TextConfig(msgspec.Struct, kw_only=True):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """The body of POST /v1/responses. Explicit JSON nulls mean "not given"."""

    model: _Model
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: _MaxTokens | None = None
    stream: bool | None = None
    background: bool | None = None
    store: bool | None = None
    previous_response_id: _Id | None = None
    metadata: dict[str, Any] | None = None
    text: TextConfig | None = None
    priority: _Int32 | None = None  # vLLM extension
    # Checked by the chat API's decoder (gateway/api/openai/protocol.py sampling_of).
    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    seed: Any = None
    stop: Any = None
    min_p: Any = None
    repetition_penalty: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    logit_bias: Any = None
    stop_token_ids: Any = None
    ignore_eos: Any = None
    include_stop_str_in_output: Any = None
    skip_special_tokens: Any = None
    min_tokens: Any = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    # Not served here: refused by name when they ask for something (None or empty passes).
    include: list[str] | None = None
    top_logprobs: int | None = None
    reasoning: dict[str, Any] | None = None
    prompt: Any = None
    conversation: Any = None
    truncation: str | None = None
    structured_outputs: Any = None
    # Accepted, without effect on the output.
    user: Any = None
    service_tier: Any = None
    max_tool_calls: Any = None
    safety_identifier: Any = None
    prompt_cache_key: Any = None
    stream_options: Any = None


class Decoded:
    """A validated request: what the engine gets, and what the Response object echoes."""

    __slots__ = ("body", "messages", "sampling", "text", "tools", "unknown")

    def __init__(
        self,
        body: ResponsesRequest,
        messages: tuple[Message, ...],
        sampling: Sampling,
        text: dict[str, Any],
        tools: Tools | None = None,
        unknown: UnknownFields | None = None,
    ) -> None:
        self.body = body
        self.unknown = unknown  # its body's fields that the API declares none for
        self.tools = tools
        self.messages = messages  # this turn's input (without the instructions)
        self.sampling = sampling
        self.text = text  # the Response object's `text`

    @property
    def store(self) -> bool:
        return self.body.store is not False

    @property
    def background(self) -> bool:
        return bool(self.body.background)

    @property
    def stream(self) -> bool:
        return bool(self.body.stream)


_PART = 'must be a content part like {"type": "input_text", "text": "..."}'
# What each field must be, keyed by its path with list indices elided ("input[].role").
EXPECTED: Final[dict[str, str]] = {
    "model": "must be a non-empty string",
    "input": "must be a string or an array of input items",
    "input[]": 'must be an input item like {"role": "user", "content": "..."}',
    "input[].type": "must be a string",
    "input[].role": "must be one of 'user', 'assistant', 'system', 'developer'",
    "input[].content": "must be a string or an array of content parts",
    "input[].content[]": _PART,
    "input[].content[].type": "must be a string",
    "input[].content[].text": "must be a string",
    "input[].call_id": "must be a string",
    "input[].name": "must be a string",
    "input[].arguments": "must be a string (JSON text)",
    "input[].output": "must be a string",
    "parallel_tool_calls": "must be a boolean",
    "instructions": "must be a string",
    "max_output_tokens": f"must be an integer greater than 0 (at most {INT32_MAX})",
    "stream": "must be a boolean",
    "background": "must be a boolean",
    "store": "must be a boolean",
    "previous_response_id": "must be a response id (a string)",
    "metadata": "must be an object of string values",
    "text": 'must be an object like {"format": {"type": "text"}}',
    "text.format": 'must be an object like {"type": "json_schema", "schema": {}}',
    "text.format.type": "must be a string",
    "text.format.schema": "must be a JSON schema (an object)",
    "priority": "must be a 32-bit integer",
    "tools": "must be an array of tools",
    "include": "must be an array of strings",
    "top_logprobs": "must be an integer",
    "reasoning": "must be an object",
    "truncation": "must be 'auto' or 'disabled'",
}
_DECODER: Final = BodyDecoder(ResponsesRequest, EXPECTED)


def _check_unserved(req: ResponsesRequest) -> None:
    if req.include:
        raise not_served("include", f"{req.include[0]!r} is not served")
    if req.top_logprobs:
        raise not_served("top_logprobs", "logprobs are served by the chat completions API")
    if req.reasoning is not None and any(v is not None for v in req.reasoning.values()):
        raise not_served("reasoning", "the model reasons as it is")
    if req.prompt is not None:
        raise not_served("prompt", "prompt templates are not served")
    if req.conversation is not None:
        raise not_served("conversation", "conversations are not served (previous_response_id is)")
    if req.truncation not in (None, "disabled"):
        raise not_served("truncation", "prompts are not truncated")
    if req.structured_outputs is not None:
        raise not_served("structured_outputs", "use text.format")
    if req.metadata and not all(isinstance(v, str) for v in req.metadata.values()):
        raise bad("metadata", EXPECTED["metadata"])
    if req.background and req.store is False:
        raise bad("background", "background can only be used when `store` is true")


def _text_of(parts: list[Part], field: str) -> str:
    texts: list[str] = []
    for j, part in enumerate(parts):
        param = f"{field}[{j}]"
        if part.type in ("input_image", "input_file", "input_audio"):
            raise not_served(f"{param}.type", f"{part.type} parts are not served")
        if part.type not in _TEXT_PARTS:
            raise bad(f"{param}.type", f"must be 'input_text' or 'output_text', got {part.type!r}")
        if part.text is None:
            raise InvalidRequest(f"Missing required parameter: '{param}.text'.", f"{param}.text")
        texts.append(part.text)
    return "\n".join(texts)  # joined with newlines, as the chat edge joins text parts


def messages_of(req: ResponsesRequest) -> tuple[Message, ...]:
    """This turn's input as the core's messages."""
    if isinstance(req.input, str):
        return (Message("user", req.input),)
    if not req.input:
        raise bad("input", "must not be empty")
    out: list[Message] = []
    for i, item in enumerate(req.input):
        field = f"input[{i}]"
        if item.type == "function_call":
            function_call(out, field, item.call_id, item.name, item.arguments)
            continue
        if item.type == "function_call_output":
            out.append(function_output(field, item.call_id, item.output))
            continue
        if item.type != "message":
            raise not_served(f"{field}.type", f"{item.type!r} items are not served")
        if item.role is None:
            raise InvalidRequest(f"Missing required parameter: '{field}.role'.", f"{field}.role")
        content = item.content
        if content is None:
            raise InvalidRequest(
                f"Missing required parameter: '{field}.content'.", f"{field}.content"
            )
        text = content if isinstance(content, str) else _text_of(content, f"{field}.content")
        # Chat templates rarely know the "developer" role; it means "system" there.
        out.append(Message("system" if item.role == "developer" else item.role, text))
    if req.input[-1].type == "function_call":
        raise bad(f"input[{len(req.input) - 1}]", "a function call needs its output after it")
    if req.input[-1].role == "assistant":
        # The engine's chat template opens a new assistant turn: it cannot continue one.
        raise not_served(f"input[{len(req.input) - 1}].role", "a final assistant message")
    return tuple(out)


def _format(req: ResponsesRequest) -> tuple[Structured | None, dict[str, Any]]:
    """`text.format` as structured outputs, and the `text` the Response object echoes."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None, {"format": {"type": "text"}}
    echo = msgspec.to_builtins(fmt)
    if fmt.type == "json_object":
        return Structured(field="text.format", json_object=True), {"format": echo}
    if fmt.type == "json_schema":
        if fmt.schema is None:
            raise InvalidRequest("Missing required parameter: 'text.format.schema'.", "text.format")
        schema = msgspec.json.encode(fmt.schema).decode()
        return Structured(field="text.format", json=schema), {"format": echo}
    raise bad("text.format.type", "must be 'text', 'json_object' or 'json_schema'")


def decode_responses(body: bytes, default_max_tokens: int) -> Decoded:
    """Decode and validate a POST /v1/responses body. Raises `InvalidRequest`."""
    req, unknown = _DECODER.decode(body)
    _check_unserved(req)
    messages = messages_of(req)
    fields = {k: getattr(req, k) for k in SAMPLING_FIELDS if getattr(req, k) is not None}
    if req.max_output_tokens is not None:
        fields["max_tokens"] = req.max_output_tokens
    sampling = sampling_of(fields, default_max_tokens)
    structured, text = _format(req)
    if structured is not None:
        sampling = msgspec.structs.replace(sampling, structured=structured)
    tools = tools_of(req.tools, req.tool_choice, req.parallel_tool_calls)
    return Decoded(req, messages, sampling, text, tools, unknown)


def generation_request(
    decoded: Decoded, request_id: str, prior: tuple[Message, ...] = ()
) -> GenerationRequest:
    """The engine request: the instructions, the conversation before (`prior`: a previous
    response's input and output), then this turn's input. Always streamed from the engine:
    the edge follows it delta by delta, whichever way the client asked."""
    body = decoded.body
    system = (Message("system", body.instructions),) if body.instructions else ()
    out = GenerationRequest(
        request_id=request_id,
        model=body.model,
        sampling=decoded.sampling,
        messages=system + prior + decoded.messages,
        stream=True,
        priority=body.priority,
    )
    out.generation.tools = decoded.tools
    # An answer given whole is parsed whole, as chat's is (a tool parser's arguments as it
    # writes them whole); one that streams (background ones too) is parsed as it comes.
    out.generation.parse_whole = not (decoded.stream or decoded.background)
    out.unknown_fields = decoded.unknown
    return out
