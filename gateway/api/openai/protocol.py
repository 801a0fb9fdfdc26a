"""Decoding and validation of OpenAI request bodies into `GenerationRequest`.

The bodies are those of POST /v1/chat/completions and POST /v1/completions as the official
`openai` SDK sends them. Unknown fields are ignored (like vLLM); known fields that ask for
something the gateway cannot do (n > 1, logprobs, echo, best_of > 1) are rejected with a 400
naming the field, and so is a body nested too deeply for the decoder. Every error is an
`InvalidRequest` whose `param` is the field as OpenAI names it, e.g. ``"messages[0].content"``.

This is the hot path of every request: each endpoint has one cached `msgspec.json.Decoder`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from gateway.types import GenerationRequest, InvalidRequest, Message, Sampling

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "ContentPart",
    "StreamOptions",
    "decode_chat",
    "decode_completion",
]

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_UINT64_MAX: Final = 2**64 - 1

# Sampling.max_tokens and top_k travel to the engine as int32, the seed as uint64.
_MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=_INT32_MAX)]
_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_TopK = Annotated[int, msgspec.Meta(ge=-1, le=_INT32_MAX)]
_Seed = Annotated[int, msgspec.Meta(ge=0)]  # msgspec bounds must fit int64: le checked later
_Int32 = Annotated[int, msgspec.Meta(ge=_INT32_MIN, le=_INT32_MAX)]
_Stop = str | Annotated[list[str], msgspec.Meta(max_length=4)]
_Model = Annotated[str, msgspec.Meta(min_length=1)]

_T = TypeVar("_T")

Role = Literal["system", "user", "assistant", "developer", "tool"]


class ContentPart(msgspec.Struct):
    """One part of a chat message's content; only ``{"type": "text", "text": ...}`` is served."""

    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class _Common(msgspec.Struct, kw_only=True):
    """Fields shared by both endpoints. Explicit JSON nulls mean "not given"."""

    model: _Model
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    top_k: _TopK | None = None  # vLLM extension; -1 and 0 both mean "off"
    seed: _Seed | None = None
    stop: _Stop | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    ignore_eos: bool | None = None  # vLLM extension
    user: str | None = None  # accepted, ignored
    priority: _Int32 | None = None  # vLLM extension
    echo: bool | None = None
    best_of: int | None = None
    # Accepted and ignored because no field is declared for them: frequency_penalty,
    # presence_penalty, logit_bias, top_logprobs, response_format, tools, tool_choice,
    # parallel_tool_calls, metadata, store, service_tier, suffix, ...


class ChatCompletionRequest(_Common, kw_only=True):
    """The body of POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    logprobs: bool | None = None


class CompletionRequest(_Common, kw_only=True):
    """The body of POST /v1/completions."""

    prompt: str | list[Any]
    logprobs: int | None = None


_CHAT_DECODER: Final = msgspec.json.Decoder(ChatCompletionRequest)
_COMPLETION_DECODER: Final = msgspec.json.Decoder(CompletionRequest)


# --- error messages --------------------------------------------------------------------------

_MUST_BE_POSITIVE = f"must be an integer greater than 0 (at most {_INT32_MAX})"

# What each field must be, keyed by its path with list indices elided ("messages[].role").
_EXPECTED: Final[dict[str, str]] = {
    "model": "must be a non-empty string",
    "messages": "must be a non-empty array of message objects",
    "messages[]": "must be a message object with a 'role' and a 'content'",
    "messages[].role": "must be one of 'system', 'user', 'assistant', 'developer', 'tool'",
    "messages[].content": "must be a string, an array of text content parts, or null",
    "messages[].content[]": 'must be a content part object like {"type": "text", "text": "..."}',
    "messages[].content[].type": "must be a string",
    "messages[].content[].text": "must be a string",
    "messages[].name": "must be a string",
    "prompt": "must be a string, or an array holding exactly one string",
    "max_tokens": _MUST_BE_POSITIVE,
    "max_completion_tokens": _MUST_BE_POSITIVE,
    "temperature": "must be a number between 0 and 2",
    "top_p": "must be a number greater than 0 and at most 1",
    "top_k": "must be an integer: -1 or 0 to disable top-k, or a positive number of tokens",
    "seed": f"must be an integer between 0 and {_UINT64_MAX}",
    "stop": "must be a string or an array of at most 4 strings",
    "stream": "must be a boolean",
    "stream_options": 'must be an object like {"include_usage": true}',
    "stream_options.include_usage": "must be a boolean",
    "n": "must be an integer",
    "ignore_eos": "must be a boolean",
    "user": "must be a string",
    "priority": "must be a 32-bit integer",
    "echo": "must be a boolean",
    "best_of": "must be an integer",
}
_EXPECTED_CHAT: Final = {**_EXPECTED, "logprobs": "must be a boolean"}
_EXPECTED_COMPLETION: Final = {**_EXPECTED, "logprobs": "must be an integer or null"}

# Fields whose element errors are reported against the field itself ("stop", not "stop[2]").
_WHOLE_FIELDS: Final = frozenset({"stop", "prompt"})

_AT_PATH: Final = re.compile(r"^(?P<detail>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING: Final = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")
_INDEX: Final = re.compile(r"\[\d+\]")
_GOT_TYPE: Final = re.compile(r", got `(\w+)`")
_GOT_ENUM: Final = re.compile(r"^Invalid enum value (.*)$", re.DOTALL)
_JSON_TYPES: Final = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _validation_error(err: msgspec.ValidationError, expected: dict[str, str]) -> InvalidRequest:
    """Turn msgspec's "... - at `$.messages[0].role`" into an OpenAI-style error and param."""
    m = _AT_PATH.match(str(err))
    assert m is not None  # the pattern matches any string
    detail = m["detail"]
    path = (m["path"] or "").lstrip(".")
    missing = _MISSING.match(detail)
    if missing is not None:
        param = f"{path}.{missing['field']}" if path else missing["field"]
        return InvalidRequest(f"Missing required parameter: '{param}'.", param)
    if not path:
        return InvalidRequest("The request body must be a JSON object.", None)
    top = path.split(".", 1)[0].split("[", 1)[0]
    if top in _WHOLE_FIELDS:
        path = top
    what = expected.get(_INDEX.sub("[]", path))
    if what is None:
        what = detail[0].lower() + detail[1:]
    elif (got := _GOT_TYPE.search(detail)) is not None:
        what += f"; got {_JSON_TYPES.get(got[1], got[1])}"
    elif (got := _GOT_ENUM.match(detail)) is not None:
        what += f"; got {got[1]}"
    return InvalidRequest(f"Invalid value for '{path}': {what}.", path)


# msgspec bounds its recursion by the interpreter's (sys.getrecursionlimit(), 1000 frames less
# those in use): a body nested deeper fails fast. Checking it here costs nothing; a scan of every
# body for its depth would cost as much as the whole decode.
_TOO_DEEP: Final = "The request body nests arrays and objects too deeply."


def _decode(decoder: msgspec.json.Decoder[_T], body: bytes, expected: dict[str, str]) -> _T:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as err:
        raise _validation_error(err, expected) from None
    except msgspec.DecodeError as err:
        if not body:
            raise InvalidRequest("The request body is not valid JSON: it is empty.") from None
        raise InvalidRequest(f"The request body is not valid JSON ({err}).", None) from None
    except RecursionError:
        raise InvalidRequest(_TOO_DEEP, None) from None


# --- conversion ------------------------------------------------------------------------------


def _check_common(req: _Common) -> None:
    if req.n is not None and req.n != 1:
        raise InvalidRequest("Invalid value for 'n': only n=1 is supported.", "n")
    if req.best_of is not None and req.best_of != 1:
        raise InvalidRequest("Invalid value for 'best_of': only best_of=1 is supported.", "best_of")
    if req.echo:
        raise InvalidRequest("echo is not supported.", "echo")
    if req.stream_options is not None and not req.stream:
        raise InvalidRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )


def _sampling(req: _Common, default_max_tokens: int) -> Sampling:
    max_tokens = req.max_completion_tokens
    if max_tokens is None:
        max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
    stop: tuple[str, ...]
    if req.stop is None:
        stop = ()
    elif isinstance(req.stop, str):
        stop = (req.stop,)
    else:
        stop = tuple(req.stop)
    if "" in stop:
        raise InvalidRequest("Invalid value for 'stop': stop strings must not be empty.", "stop")
    if req.seed is not None and req.seed > _UINT64_MAX:
        raise InvalidRequest(f"Invalid value for 'seed': {_EXPECTED['seed']}.", "seed")
    top_k = req.top_k
    return Sampling(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=0 if top_k is None or top_k < 0 else top_k,
        seed=req.seed,
        stop=stop,
        ignore_eos=bool(req.ignore_eos),
    )


def _request(
    req: _Common,
    request_id: str,
    default_max_tokens: int,
    prompt: str | None = None,
    messages: tuple[Message, ...] | None = None,
) -> GenerationRequest:
    stream = bool(req.stream)
    opts = req.stream_options
    return GenerationRequest(
        request_id=request_id,
        model=req.model,
        sampling=_sampling(req, default_max_tokens),
        prompt=prompt,
        messages=messages,
        stream=stream,
        include_usage=stream and opts is not None and bool(opts.include_usage),
        priority=req.priority,
    )


def _message(i: int, msg: ChatMessage) -> Message:
    # Chat templates rarely know OpenAI's "developer" role; it means "system" there.
    role = "system" if msg.role == "developer" else msg.role
    content = msg.content
    if isinstance(content, str):
        return Message(role, content)
    if content is None:
        if msg.role != "assistant":
            param = f"messages[{i}].content"
            raise InvalidRequest(
                f"Invalid value for '{param}': content is required for '{msg.role}' messages.",
                param,
            )
        return Message(role, "")
    texts: list[str] = []
    for j, part in enumerate(content):
        if part.type != "text":
            param = f"messages[{i}].content[{j}].type"
            raise InvalidRequest(
                f"Invalid value for '{param}': only 'text' content parts are supported, "
                f"got {part.type!r}.",
                param,
            )
        if part.text is None:
            param = f"messages[{i}].content[{j}].text"
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param)
        texts.append(part.text)
    # Text parts are joined with newlines, as vLLM does.
    return Message(role, "\n".join(texts))


def decode_chat(body: bytes, request_id: str, default_max_tokens: int = 256) -> GenerationRequest:
    """Decode and validate a POST /v1/chat/completions body.

    `default_max_tokens` applies when neither max_tokens nor max_completion_tokens is given
    (OpenAI's default is "the rest of the context", which the caller knows, not this layer).
    Raises `InvalidRequest` with the offending field in `param`.
    """
    req = _decode(_CHAT_DECODER, body, _EXPECTED_CHAT)
    _check_common(req)
    if req.logprobs:
        raise InvalidRequest("logprobs is not supported.", "logprobs")
    messages = tuple([_message(i, m) for i, m in enumerate(req.messages)])
    return _request(req, request_id, default_max_tokens, messages=messages)


def decode_completion(
    body: bytes, request_id: str, default_max_tokens: int = 16
) -> GenerationRequest:
    """Decode and validate a POST /v1/completions body.

    `default_max_tokens` applies when max_tokens is not given (OpenAI's default is 16).
    Raises `InvalidRequest` with the offending field in `param`.
    """
    req = _decode(_COMPLETION_DECODER, body, _EXPECTED_COMPLETION)
    _check_common(req)
    if req.logprobs is not None:
        raise InvalidRequest("logprobs is not supported.", "logprobs")
    prompt = req.prompt
    if not isinstance(prompt, str):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise InvalidRequest(
                "Invalid value for 'prompt': must be a string, or an array holding exactly one "
                "string (batches of prompts and token-id prompts are not supported).",
                "prompt",
            )
        prompt = prompt[0]
    return _request(req, request_id, default_max_tokens, prompt=prompt)
