"""What an OpenAI request body must be, and the errors that say so: each names the field at
fault (`param`) the way OpenAI does, e.g. ``"messages[0].content"``."""

from __future__ import annotations

import re
from typing import Final, Generic, TypeVar, cast

import msgspec

from gateway.policy.unknown_fields import unknown_of
from gateway.types import InvalidRequest, UnknownFields

INT32_MAX: Final = 2**31 - 1
UINT64_MAX: Final = 2**64 - 1

_T = TypeVar("_T")
_S = TypeVar("_S", bound=msgspec.Struct)

_MUST_BE_POSITIVE = f"must be an integer greater than 0 (at most {INT32_MAX})"

# What each field must be, keyed by its path with list indices elided ("messages[].role").
EXPECTED: Final[dict[str, str]] = {
    "model": "must be a non-empty string",
    "messages": "must be a non-empty array of message objects",
    "messages[]": "must be a message object with a 'role' and a 'content'",
    "messages[].role": "must be one of 'system', 'user', 'assistant', 'developer', 'tool'",
    "messages[].content": "must be a string, an array of text content parts, or null",
    "messages[].content[]": 'must be a content part object like {"type": "text", "text": "..."}',
    "messages[].content[].type": "must be a string",
    "messages[].content[].text": "must be a string",
    "messages[].name": "must be a string",
    "messages[].tool_calls": "must be an array of tool calls",
    "messages[].tool_calls[]": (
        'must be a tool call like {"id": "...", "type": "function", '
        '"function": {"name": "...", "arguments": "..."}}'
    ),
    "messages[].tool_calls[].id": "must be a string",
    "messages[].tool_calls[].type": "must be a string",
    "messages[].tool_calls[].function": "must be an object with a 'name' and 'arguments'",
    "messages[].tool_calls[].function.name": "must be a string",
    "messages[].tool_calls[].function.arguments": "must be a string (JSON text)",
    "messages[].tool_call_id": "must be a string",
    "tools": "must be a non-empty array of tools",
    "parallel_tool_calls": "must be a boolean",
    "prompt": "must be a string, or a non-empty array of token ids",
    "max_tokens": _MUST_BE_POSITIVE,
    "max_completion_tokens": _MUST_BE_POSITIVE,
    "temperature": "must be a number between 0 and 2",
    "top_p": "must be a number greater than 0 and at most 1",
    "top_k": "must be an integer: -1 or 0 to disable top-k, or a positive number of tokens",
    "seed": f"must be an integer between 0 and {UINT64_MAX}",
    "stop": "must be a string or an array of at most 4 strings",
    "stream": "must be a boolean",
    "stream_options": 'must be an object like {"include_usage": true}',
    "stream_options.include_usage": "must be a boolean",
    "stream_options.resumable": "must be a boolean",
    "n": "must be an integer",
    "ignore_eos": "must be a boolean",
    "user": "must be a string",
    "priority": "must be a 32-bit integer",
    "echo": "must be a boolean",
    "best_of": "must be an integer",
    "presence_penalty": "must be a number between -2 and 2",
    "frequency_penalty": "must be a number between -2 and 2",
    "repetition_penalty": "must be a number greater than 0",
    "min_p": "must be a number between 0 and 1",
    "logit_bias": "must be an object mapping token ids to numbers between -100 and 100",
    "stop_token_ids": "must be an array of token ids (integers of at least 0)",
    "include_stop_str_in_output": "must be a boolean",
    "min_tokens": "must be an integer of at least 0",
    "skip_special_tokens": "must be a boolean",
    "spaces_between_special_tokens": "must be a boolean",
    "bad_words": "must be an array of strings",
    "allowed_token_ids": "must be an array of token ids (integers of at least 0)",
    "prompt_logprobs": "must be an integer",
    "logprob_token_ids": "must be an array of token ids (integers of at least 0)",
    "truncate_prompt_tokens": "must be an integer of at least -1",
    "truncation_side": "must be 'left' or 'right'",
}
EXPECTED_CHAT: Final = {**EXPECTED, "logprobs": "must be a boolean"}
EXPECTED_COMPLETION: Final = {**EXPECTED, "logprobs": "must be an integer or null"}

# Fields whose element errors are reported against the field itself ("stop", not "stop[2]").
_WHOLE_FIELDS: Final = frozenset(
    {
        "stop",
        "prompt",
        "logit_bias",
        "stop_token_ids",
        "bad_words",
        "allowed_token_ids",
        "logprob_token_ids",
    }
)

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


def validation_error(err: msgspec.ValidationError, expected: dict[str, str]) -> InvalidRequest:
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


def decode_json(decoder: msgspec.json.Decoder[_T], body: bytes, expected: dict[str, str]) -> _T:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as err:
        raise validation_error(err, expected) from None
    except msgspec.DecodeError as err:
        if not body:
            raise InvalidRequest("The request body is not valid JSON: it is empty.") from None
        raise InvalidRequest(f"The request body is not valid JSON ({err}).", None) from None
    except RecursionError:
        raise InvalidRequest(_TOO_DEEP, None) from None


_UNKNOWN_FIELD: Final = "Object contains unknown field `"
_KEYS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])  # (the values left undecoded)


class BodyDecoder(Generic[_S]):
    """Decodes a body into `type_`, and names its top-level fields that `type_` declares none
    for (ignored: gateway/policy/unknown_fields.py). A body without one is decoded once, by a
    strict copy of `type_` (msgspec's forbid_unknown_fields, whose error names the first
    only); one with some costs its keys' scan and the decode that ignores them besides."""

    __slots__ = ("_expected", "_known", "_strict", "_tolerant")

    def __init__(self, type_: type[_S], expected: dict[str, str]) -> None:
        name, module = type_.__name__, type_.__module__
        strict = msgspec.defstruct(
            name, [], bases=(type_,), module=module, forbid_unknown_fields=True
        )
        self._strict = msgspec.json.Decoder(cast("type[_S]", strict))
        self._tolerant = msgspec.json.Decoder(type_)
        self._known = frozenset(type_.__struct_encode_fields__)
        self._expected = expected

    def decode(self, body: bytes) -> tuple[_S, UnknownFields | None]:
        try:
            return self._strict.decode(body), None
        except msgspec.ValidationError as err:
            # (only the top level forbids them: an unknown field's error has no path)
            if not str(err).startswith(_UNKNOWN_FIELD):
                raise validation_error(err, self._expected) from None
        except (msgspec.DecodeError, RecursionError):
            pass  # (the decode below says what)
        req = decode_json(self._tolerant, body, self._expected)
        # (the keys of unknown fields are read here only: one may not be valid UTF-8)
        keys: dict[str, msgspec.Raw] = decode_json(_KEYS, body, self._expected)
        return req, unknown_of(keys, self._known)


def not_served(name: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{name} is not supported: {what}.", name)


def bad(field: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{field}': {what}.", field)
