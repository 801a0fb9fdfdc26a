"""A chat request's tools into the one `Tools` of its engine parameters (vLLM's checks and
errors), and a parsed answer back into OpenAI's chunks, messages and finish reasons."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from shardgate.v1 import parsed
from shardgate.v1.params import ToolCall, Tools
from shardgate.v1.parsed import Parsed, ToolCallDelta

from gateway.api.openai.answer import Answer, delta_of, message_of
from gateway.api.openai.encode import ChunkEncoder
from gateway.api.openai.protocol import decode_chat
from gateway.types import InvalidRequest, Message

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
TEXT = json.dumps([TOOL], separators=(",", ":"))


def chat(**fields: Any) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    ).encode()


@pytest.mark.parametrize(
    ("fields", "tools"),
    [
        ({}, None),
        ({"tool_choice": "none"}, None),
        ({"tools": [TOOL]}, Tools(tools=TEXT, choice="auto")),
        ({"tools": [TOOL], "tool_choice": "none"}, Tools(tools=TEXT, choice="none")),
        ({"tools": [TOOL], "tool_choice": "required"}, Tools(tools=TEXT, choice="required")),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
            Tools(tools=TEXT, choice="function", function="f"),
        ),
        (
            {"tools": [TOOL], "parallel_tool_calls": False},
            Tools(tools=TEXT, choice="auto", parallel_tool_calls=False),
        ),
    ],
)
def test_tools_and_tool_choice(fields: dict[str, Any], tools: Tools | None) -> None:
    assert decode_chat(chat(**fields), "r").generation.tools == tools


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"tools": []}, "tools", "`tools` must not be an empty array."),
        ({"tool_choice": "auto"}, "tool_choice", "When using `tool_choice`, `tools` must be set."),
        (
            {"tools": [TOOL], "tool_choice": "always"},
            "tool_choice",
            "Invalid value for `tool_choice`",
        ),
        ({"tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice.function", ""),
        ({"tools": [TOOL], "tool_choice": {"function": {}}}, "tool_choice.function.name", ""),
        (
            {"tools": [TOOL], "tool_choice": {"function": {"name": "g"}}},
            "tool_choice",
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
        ),
        ({"tools": [{"type": "code"}]}, "tools[0]", ""),
        ({"tools": [{"function": {"name": ""}}]}, "tools[0].function.name", ""),
        (
            {"tools": [{"function": {"name": "f", "parameters": 3}}]},
            "tools[0].function.parameters",
            "",
        ),
        ({"tools": "f"}, "tools", "must be a non-empty array of tools"),
        ({"tools": [TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls", ""),
    ],
)
def test_bad_tools_are_400_naming_the_field(
    fields: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(chat(**fields), "r")
    assert e.value.param == param
    assert message in e.value.message


def test_a_conversation_carries_its_calls_and_answers() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": [{"type": "text", "text": "2"}], "tool_call_id": "c1"},
    ]
    req = decode_chat(json.dumps({"model": "m", "messages": messages}).encode(), "r")
    assert req.messages == (
        Message("user", "hi"),
        Message("assistant", "", (ToolCall("c1", "f", '{"a": 1}'),)),
        Message("tool", "2", tool_call_id="c1"),
    )


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (
            {
                "role": "user",
                "content": "x",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}],
            },
            "messages[0].tool_calls",
        ),
        ({"role": "assistant", "content": "x", "tool_call_id": "c"}, "messages[0].tool_call_id"),
        (
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "x", "function": {"name": "f", "arguments": ""}}
                ],
            },
            "messages[0].tool_calls[0].type",
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
            "messages[0].tool_calls[0].function.arguments",
        ),
    ],
)
def test_bad_calls_in_the_conversation_are_400(message: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(json.dumps({"model": "m", "messages": [message]}).encode(), "r")
    assert e.value.param == param


def test_the_answer_is_parsed_whole_unless_streamed() -> None:
    assert decode_chat(chat(), "r").generation.parse_whole
    assert not decode_chat(chat(stream=True), "r").generation.parse_whole


# --- the answer ------------------------------------------------------------------------------

FIRST = ToolCallDelta(index=0, id="chatcmpl-tool-1", name="f", arguments='{"a": ')
MORE = ToolCallDelta(index=0, arguments="1}")
SECOND = ToolCallDelta(index=1, id="chatcmpl-tool-2", name="g", arguments="{}")


def test_a_lagging_clients_pieces_merge_into_one() -> None:
    parts = [Parsed(content="x"), Parsed(tool_calls=(FIRST,)), Parsed(tool_calls=(MORE, SECOND))]
    assert parsed.merge(parts) == Parsed(
        content="x",
        tool_calls=(msgspec.structs.replace(FIRST, arguments='{"a": 1}'), SECOND),
    )
    assert parsed.merge([Parsed(reasoning="a"), Parsed(reasoning="b", content="")]) == Parsed(
        content="", reasoning="ab"
    )


def test_chunks_say_what_vllm_streams() -> None:
    assert delta_of(parsed.EMPTY) is None
    assert delta_of(Parsed(content="hi", reasoning="so")) == {"content": "hi", "reasoning": "so"}
    assert delta_of(Parsed(tool_calls=(FIRST, MORE))) == {
        "tool_calls": [
            {
                "index": 0,
                "id": "chatcmpl-tool-1",
                "type": "function",
                "function": {"name": "f", "arguments": '{"a": '},
            },
            {"index": 0, "function": {"arguments": "1}"}},
        ]
    }
    buf = bytearray()
    ChunkEncoder("r", "m", 7, "chat").delta_chunk_into(buf, {"content": "\ud800x"})
    assert buf.startswith(b"data: ") and buf.endswith(b"\n\n")
    chunk = json.loads(buf[6:])
    assert chunk["choices"] == [
        {
            "index": 0,
            "delta": {"content": "\ufffdx"},
            "logprobs": None,
            "finish_reason": None,
            "token_ids": None,
        }
    ]


def test_the_whole_message() -> None:
    answer = Parsed(content="", tool_calls=(FIRST, SECOND))
    assert message_of(answer) == {
        "role": "assistant",
        "content": "",
        "reasoning": None,
        "tool_calls": [
            {
                "id": "chatcmpl-tool-1",
                "type": "function",
                "function": {"name": "f", "arguments": '{"a": '},
            },
            {
                "id": "chatcmpl-tool-2",
                "type": "function",
                "function": {"name": "g", "arguments": "{}"},
            },
        ],
    }


AUTO, REQUIRED = Tools(tools=TEXT), Tools(tools=TEXT, choice="required")
NAMED, NONE = Tools(tools=TEXT, choice="function", function="f"), Tools(tools=TEXT, choice="none")


@pytest.mark.parametrize(
    ("tools", "called", "reason", "whole", "expected"),
    [
        (None, False, "stop", True, "stop"),
        (AUTO, True, "stop", True, "tool_calls"),
        (AUTO, True, "stop", False, "tool_calls"),
        (AUTO, False, "stop", False, "stop"),
        (AUTO, True, "length", False, "length"),
        (AUTO, True, "length", True, "tool_calls"),  # (vLLM's: a call was made)
        (REQUIRED, False, "stop", True, "tool_calls"),  # (vLLM's, whatever was parsed)
        (REQUIRED, False, "stop", False, "stop"),
        (REQUIRED, True, "stop", False, "tool_calls"),
        (REQUIRED, True, "length", True, "length"),
        (NAMED, True, "stop", True, "stop"),
        (NAMED, True, "stop", False, "stop"),
        (NONE, False, "stop", True, "stop"),
    ],
)
def test_finish_reasons_are_vllms(
    tools: Tools | None, called: bool, reason: str, whole: bool, expected: str
) -> None:
    answer = Answer(tools)
    answer.add(parsed.encode(Parsed(tool_calls=(FIRST,) if called else ())))
    assert answer.finish_reason(reason, whole) == expected


def test_a_lagging_streams_deltas_keep_their_parsed_pieces() -> None:
    from gateway.runtime.stream import ResponseStream
    from gateway.types import Delta

    stream = ResponseStream(max_pending=2)
    pieces = [Parsed(tool_calls=(FIRST,)), Parsed(tool_calls=(MORE,)), Parsed(content="")]
    for i, p in enumerate(pieces):
        stream.push(Delta([i], "x", parsed=parsed.encode(p)))
    [merged] = stream.pending
    assert merged.token_ids == [0, 1, 2]
    assert parsed.decode(merged.parsed) == parsed.merge(pieces)


def test_an_answer_without_its_reasoning() -> None:
    """chat's include_reasoning false: the parsed reasoning is left out, streamed and whole."""
    from gateway.api.openai.answer import Answer

    hidden, shown = Answer(None, hide_reasoning=True), Answer(None)
    for answer in (hidden, shown):
        answer.add(parsed.encode(Parsed(reasoning="so", content="hi")))
    assert delta_of(hidden.add(parsed.encode(Parsed(reasoning="more")))) is None
    assert hidden.whole == Parsed()
    assert shown.whole == Parsed(reasoning="so", content="hi")
