"""Anthropic tool use onto the core's tools and back (gateway.api.anthropic tools, blocks,
blocks_stream): tools and tool_choice as a chat request's, tool_use / tool_result blocks as a
conversation's calls and tool messages, and the parsed answer as tool_use blocks and events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shardgate.v1 import parsed
from shardgate.v1.params import ToolCall, Tools

from gateway.api.anthropic import encode
from gateway.api.anthropic.blocks_stream import BlockStream
from gateway.api.anthropic.protocol import decode_messages
from gateway.api.anthropic.tools import input_of, tool_use_id, tool_uses
from gateway.types import Finish, InvalidRequest, Message, Usage
from tests.unit.api.test_anthropic_protocol import USER, body, events

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"name": "weather", "description": "The weather.", "input_schema": SCHEMA}
TIME = {"type": "custom", "name": "time", "input_schema": {"type": "object"}}
FUNCTIONS = [
    {
        "type": "function",
        "function": {"name": "weather", "parameters": SCHEMA, "description": "The weather."},
    },
    {"type": "function", "function": {"name": "time", "parameters": {"type": "object"}}},
]


def tools_of(**fields: Any) -> Tools | None:
    return decode_messages(body(tools=[WEATHER, TIME], **fields), "rid").generation.tools


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        (..., Tools(tools="", choice="auto")),
        ({"type": "auto"}, Tools(tools="", choice="auto")),
        ({"type": "any"}, Tools(tools="", choice="required")),
        ({"type": "none"}, Tools(tools="", choice="none")),
        ({"type": "tool", "name": "time"}, Tools(tools="", choice="function", function="time")),
        ({"type": "any", "disable_parallel_tool_use": True},
         Tools(tools="", choice="required", parallel_tool_calls=False)),
        ({"type": "auto", "disable_parallel_tool_use": False},
         Tools(tools="", choice="auto", parallel_tool_calls=True)),
    ],
)  # fmt: skip
def test_tools_and_tool_choice_are_a_chat_requests(choice: Any, want: Tools) -> None:
    got = tools_of(tool_choice=choice)
    assert got is not None
    assert json.loads(got.tools) == FUNCTIONS
    assert (got.choice, got.function, got.parallel_tool_calls) == (
        want.choice,
        want.function,
        want.parallel_tool_calls,
    )


def test_no_tools_is_none() -> None:
    assert decode_messages(body(), "rid").generation.tools is None
    assert decode_messages(body(tools=[]), "rid").generation.tools is None
    assert decode_messages(body(tool_choice={"type": "none"}), "rid").generation.tools is None


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"tools": [5]}, "tools[0]", "tool object"),
        ({"tools": [{**WEATHER, "name": ""}]}, "tools[0].name", "non-empty"),
        ({"tools": [{"name": "f", "input_schema": []}]}, "tools[0].input_schema", "JSON schema"),
        ({"tools": [{**WEATHER, "description": 3}]}, "tools[0].description", "string"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
         "tools[0].type", "server tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "sometimes"}}, "tool_choice.type", "'any'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.name", "name"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
         "tool_choice", "does not match"),
        ({"tools": [WEATHER], "tool_choice": {"type": "any", "disable_parallel_tool_use": 1}},
         "tool_choice.disable_parallel_tool_use", "boolean"),
        ({"tool_choice": {"type": "any"}}, "tool_choice", "`tools` must be set"),
    ],
)  # fmt: skip
def test_bad_tools_are_400_naming_the_field(fields: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_messages(body(**fields), "rid")
    assert e.value.param == param
    assert words in e.value.message


def test_tool_use_and_tool_result_blocks_are_calls_and_tool_messages() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    use2 = {"type": "tool_use", "id": "toolu_2", "name": "time", "input": {}}
    messages = [
        USER,
        {"role": "assistant", "content": [{"type": "text", "text": "Let me see."}, use, use2]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 degrees"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "noon"}, {"type": "text", "text": "UTC"}],
                    "is_error": False,
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3"}]},
    ]
    req = decode_messages(body(messages=messages, tools=[WEATHER, TIME]), "rid")
    assert req.messages == (
        Message("user", "hi"),
        Message(
            "assistant",
            "Let me see.",
            (
                ToolCall("toolu_1", "weather", '{"city": "Paris"}'),
                ToolCall("toolu_2", "time", "{}"),
            ),
        ),
        Message("tool", "18 degrees", tool_call_id="toolu_1"),
        Message("tool", "noon\nUTC", tool_call_id="toolu_2"),
        Message("user", "And tomorrow?"),
        Message("tool", "", tool_call_id="toolu_3"),
    )


@pytest.mark.parametrize(
    ("block", "param", "words"),
    [
        ({"type": "tool_use", "name": "f", "input": {}}, "messages[1].content[0].id", "Missing"),
        ({"type": "tool_use", "id": "t", "input": {}}, "messages[1].content[0].name", "Missing"),
        ({"type": "tool_use", "id": "t", "name": "f"}, "messages[1].content[0].input", "Missing"),
        ({"type": "tool_use", "id": "t", "name": "f", "input": [1]},
         "messages[1].content[0].input", "object"),
    ],
)  # fmt: skip
def test_bad_tool_use_blocks_are_400_naming_the_field(
    block: dict[str, Any], param: str, words: str
) -> None:
    messages = [USER, {"role": "assistant", "content": [block]}, USER]
    with pytest.raises(InvalidRequest) as e:
        decode_messages(body(messages=messages), "rid")
    assert e.value.param == param
    assert words in e.value.message


@pytest.mark.parametrize(
    ("block", "param"),
    [
        ({"type": "tool_result", "content": "x"}, "messages[0].content[0].tool_use_id"),
        ({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]},
         "messages[0].content[0].content[0].type"),
        ({"type": "tool_result", "tool_use_id": "t", "content": 5},
         "messages[0].content[0].content"),
    ],
)  # fmt: skip
def test_bad_tool_result_blocks_are_400_naming_the_field(block: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_messages(body(messages=[{"role": "user", "content": [block]}]), "rid")
    assert e.value.param == param


def test_answer_ids_and_inputs() -> None:
    assert tool_use_id("chatcmpl-tool-abc") == "toolu_abc"
    assert tool_use_id("call_7") == "toolu_call_7"
    made = tool_use_id(None)
    assert made.startswith("toolu_") and len(made) > 12 and made != tool_use_id(None)
    assert input_of('{"city": "Paris"}') == {"city": "Paris"}
    for text in (None, "", "[1]", '{"city": '):  # no object: Anthropic's input is one
        assert input_of(text) == {}


CALL = parsed.ToolCallDelta(index=0, id="chatcmpl-tool-1", name="weather", arguments='{"a": 1}')


def test_a_whole_answer_is_text_then_tool_use_blocks() -> None:
    whole = parsed.Parsed(content="Sure.", tool_calls=(CALL,))
    uses = tool_uses(whole)
    assert uses == [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"a": 1}}]
    msg = json.loads(
        encode.encode_message("rid", "m", "Sure.", Finish.STOP, None, Usage(5, 2), uses)
    )
    assert msg["content"] == [{"type": "text", "text": "Sure."}, *uses]
    assert (msg["stop_reason"], msg["stop_sequence"]) == ("tool_use", None)
    only = json.loads(encode.encode_message("rid", "m", "", Finish.STOP, "END", Usage(5, 2), uses))
    assert only["content"] == uses and only["stop_reason"] == "tool_use"
    cut = json.loads(encode.encode_message("rid", "m", "", Finish.LENGTH, None, Usage(5, 2), uses))
    assert cut["stop_reason"] == "max_tokens"
    none = json.loads(encode.encode_message("rid", "m", "", Finish.STOP, None, Usage(5, 2), []))
    assert none["content"] == [{"type": "text", "text": ""}] and none["stop_reason"] == "end_turn"
    assert tool_uses(None) == []


def test_a_streamed_answer_opens_a_block_per_text_and_call() -> None:
    enc = encode.EventEncoder("rid", "m")
    blocks = BlockStream()
    buf = bytearray()
    enc.start_into(buf, 7, text_block=False)
    steps = [
        parsed.EMPTY,
        parsed.Parsed(content="Let me "),
        parsed.Parsed(content="see."),
        parsed.Parsed(tool_calls=(parsed.ToolCallDelta(index=0, id="chatcmpl-tool-a", name="f"),)),
        parsed.Parsed(tool_calls=(parsed.ToolCallDelta(index=0, arguments='{"x": '),)),
        parsed.Parsed(tool_calls=(parsed.ToolCallDelta(index=0, arguments="1}"),)),
        parsed.Parsed(
            tool_calls=(parsed.ToolCallDelta(index=1, id="b", name="g", arguments="{}"),)
        ),
    ]
    for p in steps:
        blocks.add_into(buf, p)
    assert blocks.tool_used
    blocks.close_into(buf)
    enc.finish_into(buf, Finish.STOP, None, 9, text_block=False, tool_used=blocks.tool_used)
    got = [(name, {k: v for k, v in data.items() if k != "type"}) for name, data in events(buf)]
    assert [name for name, _ in got[:2]] == ["message_start", "ping"]
    assert got[2:] == [
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "see."}}),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}}),
        ("content_block_delta", {"index": 1, "delta": {
            "type": "input_json_delta", "partial_json": '{"x": '}}),
        ("content_block_delta", {"index": 1, "delta": {
            "type": "input_json_delta", "partial_json": "1}"}}),
        ("content_block_stop", {"index": 1}),
        ("content_block_start", {"index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_b", "name": "g", "input": {}}}),
        ("content_block_delta", {"index": 2, "delta": {
            "type": "input_json_delta", "partial_json": "{}"}}),
        ("content_block_stop", {"index": 2}),
        ("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    ]  # fmt: skip


def test_a_streamed_answer_without_calls_is_its_text() -> None:
    blocks = BlockStream()
    buf = bytearray()
    blocks.add_into(buf, parsed.EMPTY)
    blocks.close_into(buf)  # nothing opened: nothing to close
    assert buf == b"" and not blocks.tool_used
    blocks.add_into(buf, parsed.Parsed(content="hi"))
    blocks.close_into(buf)
    assert [name for name, _ in events(buf)] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]


def test_logit_bias_is_the_chat_apis_extension() -> None:
    req = decode_messages(body(logit_bias={"7": -100, "12": 2.5}), "rid")
    assert req.sampling.logit_bias == {7: -100.0, 12: 2.5}
    for bad in ({"x": 1}, {"7": 101}, [1]):
        with pytest.raises(InvalidRequest) as e:
            decode_messages(body(logit_bias=bad), "rid")
        assert e.value.param == "logit_bias"
