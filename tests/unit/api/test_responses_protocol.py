"""POST /v1/responses bodies into the core's request (gateway.api.responses.protocol)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shardgate.v1.params import Structured, ToolCall

from gateway.api.responses.protocol import decode_responses, generation_request
from gateway.types import InvalidRequest, Message


def decode(**fields: Any) -> Any:
    body = {"model": "m", "input": "hi", **fields}
    return decode_responses(json.dumps(body).encode(), 256)


def messages(**fields: Any) -> tuple[Message, ...]:
    d = decode(**fields)
    messages = generation_request(d, "r").generation.messages
    assert messages is not None
    return messages


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    assert messages(instructions="Be terse.") == (
        Message("system", "Be terse."),
        Message("user", "hi"),
    )


def test_message_items_with_strings_and_text_parts() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "b", "annotations": []}],
        },
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "c"}, {"type": "input_text", "text": "d"}],
        },
    ]
    assert messages(input=items) == (
        Message("system", "rules"),
        Message("user", "a"),
        Message("assistant", "b"),
        Message("user", "c\nd"),
    )


def test_the_prior_conversation_comes_between_instructions_and_input() -> None:
    d = decode(input="again", instructions="sys")
    prior = (Message("user", "first"), Message("assistant", "answer"))
    req = generation_request(d, "r", prior)
    assert req.generation.messages == (Message("system", "sys"), *prior, Message("user", "again"))
    assert req.stream  # followed delta by delta, whichever way the client asked


def test_sampling_fields() -> None:
    d = decode(max_output_tokens=7, temperature=0.3, top_p=0.9, top_k=5, seed=11, stop=["x"])
    s = d.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.seed, s.stop) == (
        7,
        0.3,
        0.9,
        5,
        11,
        ("x",),
    )
    assert decode().sampling.max_tokens == 256  # the gateway's default


def test_flags_and_their_defaults() -> None:
    d = decode()
    assert (d.store, d.background, d.stream) == (True, False, False)
    d = decode(store=False, stream=True)
    assert (d.store, d.background, d.stream) == (False, False, True)


@pytest.mark.parametrize(
    ("fmt", "structured"),
    [
        ({"type": "json_object"}, Structured(field="text.format", json_object=True)),
        (
            {"type": "json_schema", "name": "x", "schema": {"type": "object"}},
            Structured(field="text.format", json='{"type":"object"}'),
        ),
    ],
)
def test_text_format_is_structured_output(fmt: dict[str, Any], structured: Structured) -> None:
    d = decode(text={"format": fmt})
    assert d.sampling.structured == structured
    assert d.text == {"format": fmt}  # echoed by the Response object
    assert decode(text={"format": {"type": "text"}}).sampling.structured is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"},
            },
            "tool_choice",
        ),
        ({"tool_choice": {"type": "mcp"}}, "tool_choice"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
            "input[0].name",
        ),
        ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
            "input[0]",
        ),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"truncation": "auto"}, "truncation"),
        ({"background": True, "store": False}, "background"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"input": [{"role": "assistant", "content": "x"}]}, "input[0].role"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_k": "x"}, "top_k"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format"),
        ({"previous_response_id": ""}, "previous_response_id"),
        ({"metadata": {"a": 1}}, "metadata"),
    ],
)
def test_what_is_refused_names_its_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decode(**fields)
    assert err.value.param == param


def test_model_is_required() -> None:
    with pytest.raises(InvalidRequest) as err:
        decode_responses(b'{"input": "hi"}', 16)
    assert err.value.param == "model"


def test_function_tools_are_the_cores_tools() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    d = decode(
        tools=[tool], tool_choice={"type": "function", "name": "f"}, parallel_tool_calls=False
    )
    tools = generation_request(d, "r").generation.tools
    assert tools is not None and (tools.choice, tools.function) == ("function", "f")
    assert tools.parallel_tool_calls is False
    assert json.loads(tools.tools) == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert decode(tools=[tool]).tools is not None
    assert decode(tools=[tool]).tools.choice == "auto"  # type: ignore[union-attr]
    assert decode().tools is None and decode(tool_choice="none").tools is None


def test_function_calls_and_their_outputs_are_the_conversations() -> None:
    items = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "noon"},
    ]
    assert messages(input=items) == (
        Message("user", "weather?"),
        Message("assistant", "", (ToolCall("c1", "f", '{"a": 1}'), ToolCall("c2", "g", "{}"))),
        Message("tool", "sunny", tool_call_id="c1"),
        Message("tool", "noon", tool_call_id="c2"),
    )
    said = [{"role": "assistant", "content": "Let me look."}, items[1], items[3]]
    assert messages(input=[items[0], *said])[1] == Message(
        "assistant", "Let me look.", (ToolCall("c1", "f", '{"a": 1}'),)
    )
