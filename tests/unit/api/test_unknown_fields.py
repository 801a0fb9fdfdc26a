"""Unknown top-level fields of each API's body, as its decoder names them (validation.BodyDecoder):
accepted and named, the fields each API declares (vLLM's extensions, those accepted without
effect) never named, nested objects' left alone, and the errors a body has besides kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from gateway.api.anthropic.errors import error_body
from gateway.api.anthropic.protocol import decode_messages
from gateway.api.openai.protocol import ChatCompletionRequest, decode_chat, decode_completion
from gateway.api.openai.validation import EXPECTED_CHAT, decode_json
from gateway.api.responses.protocol import decode_responses, generation_request
from gateway.policy.unknown_fields import refusal
from gateway.types import GenerationRequest, InvalidRequest, UnknownFields

MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> GenerationRequest:
    return decode_chat(json.dumps({"model": "m", "messages": MESSAGES, **fields}).encode(), "r")


def completion(**fields: Any) -> GenerationRequest:
    return decode_completion(json.dumps({"model": "m", "prompt": "hi", **fields}).encode(), "r")


def message(**fields: Any) -> GenerationRequest:
    body = {"model": "m", "max_tokens": 4, "messages": MESSAGES, **fields}
    return decode_messages(json.dumps(body).encode(), "r")


def response(**fields: Any) -> GenerationRequest:
    decoded = decode_responses(json.dumps({"model": "m", "input": "hi", **fields}).encode(), 16)
    return generation_request(decoded, "r")


Decode = Callable[..., GenerationRequest]
# Declared by each API (vLLM's extensions among them, and what is accepted without effect).
DECLARED: list[tuple[Decode, dict[str, Any]]] = [
    (
        chat,
        {
            "ignore_eos": True,
            "top_k": 5,
            "min_p": 0.1,
            "repetition_penalty": 1.1,
            "skip_special_tokens": True,
            "chat_template_kwargs": {"x": 1},
            "include_reasoning": True,
            "priority": 1,
            "user": "u",
            "metadata": {"k": "v"},
            "store": False,
            "service_tier": "auto",
            "stream_options": {"include_usage": True},
            "stream": True,
        },
    ),
    (completion, {"ignore_eos": True, "min_tokens": 1, "echo": False, "metadata": {}, "seed": 1}),
    (
        message,
        {
            "temperature": 0.5,
            "metadata": {"user_id": "u"},
            "service_tier": "auto",
            "cache_control": {"type": "ephemeral"},
            "speed": "fast",
            "inference_geo": "x",
            "diagnostics": {},
        },
    ),
    (
        response,
        {
            "ignore_eos": True,
            "top_k": 5,
            "user": "u",
            "service_tier": "auto",
            "max_tool_calls": 1,
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "stream_options": {},
            "metadata": {"k": "v"},
        },
    ),
]


@pytest.mark.parametrize(("decode", "fields"), DECLARED, ids=lambda x: getattr(x, "__name__", ""))
def test_what_an_api_declares_is_never_named(decode: Decode, fields: dict[str, Any]) -> None:
    assert decode(**fields).unknown_fields is None
    assert decode().unknown_fields is None


@pytest.mark.parametrize(
    ("decode", "fields", "names"),
    [
        (chat, {"max_token": 8, "foo": 1}, ("max_token", "foo")),
        (chat, {"foo": 1, "max_tokens": 3, "bar": [1, {"x": 2}]}, ("foo", "bar")),
        (chat, {"use_beam_search": False}, ("use_beam_search",)),  # (vLLM's: ignored here)
        (completion, {"max_token": 8}, ("max_token",)),
        (completion, {"parallel_tool_calls": True}, ("parallel_tool_calls",)),  # (chat's)
        (message, {"temprature": 0.5}, ("temprature",)),
        (message, {"stop": ["x"]}, ("stop",)),  # (OpenAI's name; Anthropic's: stop_sequences)
        (response, {"max_tokens": 8}, ("max_tokens",)),  # (its name: max_output_tokens)
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_unknown_fields_are_named_in_the_body_s_order(
    decode: Decode, fields: dict[str, Any], names: tuple[str, ...]
) -> None:
    req = decode(**fields)
    assert req.unknown_fields == UnknownFields(names, len(names))


def test_an_unknown_field_is_ignored_as_vllm_ignores_it() -> None:
    assert chat(max_token=8).sampling.max_tokens == chat().sampling.max_tokens == 256
    assert completion(max_token=8).sampling.max_tokens == 16


def test_nested_objects_unknown_fields_are_left_alone() -> None:
    # (vLLM's messages are typed dicts: extra keys pass without a word)
    nested = [{"role": "user", "content": "hi", "x": 1}]
    assert chat(messages=nested, stream=True, stream_options={"y": 2}).unknown_fields is None


def test_many_are_counted_and_the_first_listed() -> None:
    fields = {f"f{i}": i for i in range(20)}
    u = chat(**fields).unknown_fields
    assert u == UnknownFields(tuple(f"f{i}" for i in range(8)), 20)


M = b'[{"role": "user", "content": "hi"}]'
TOLERANT = msgspec.json.Decoder(ChatCompletionRequest)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # the body's own errors, wherever they stand after an unknown field: as if it had none
        (b'{"foo": 1, "model": "m", "messages": []}', "Invalid value for 'messages'"),
        (b'{"foo": 1, "model": "m"}', "Missing required parameter: 'messages'."),
        (b'{"foo": 1, "model": "m", "messages": %b, ' % M, "not valid JSON"),
        (b'{"foo": 1, "messages": %b, "temperature": 9, "model": "m"}' % M, "'temperature'"),
        (b'{"messages": %b, "temperature": 9, "foo": 1, "model": "m"}' % M, "'temperature'"),
        (b'{"foo": 1, "messages": %b, "model": "m"} x' % M, "not valid JSON"),
    ],
)
def test_other_errors_stand(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(raw, "r")
    with pytest.raises(InvalidRequest) as before:
        decode_json(TOLERANT, raw, EXPECTED_CHAT)
    assert (e.value.message, e.value.param) == (before.value.message, before.value.param)
    assert message in e.value.message


def test_an_unknown_key_that_is_not_utf_8_is_refused_as_json_that_is_not() -> None:
    raw = b'{"model": "m", "messages": %b, "\xffmax_tokens": 2}' % M
    with pytest.raises(InvalidRequest) as e:
        decode_chat(raw, "r")
    assert "not valid JSON" in e.value.message and "UTF-8" in e.value.message


def test_the_anthropic_refusal_is_in_anthropic_s_shape() -> None:
    u = message(max_token=8).unknown_fields
    assert u is not None
    status, body = error_body(refusal(u, "anthropic"))
    assert status == 400
    assert json.loads(body) == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_token: Extra inputs are not permitted",
        },
    }
