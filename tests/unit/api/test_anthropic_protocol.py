"""Anthropic Messages bodies into the core's request, and the edge's errors and bodies
(gateway.api.anthropic)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.api.anthropic import encode
from gateway.api.anthropic.errors import error_body, error_event
from gateway.api.anthropic.protocol import decode_count_tokens, decode_messages
from gateway.types import (
    Finish,
    GatewayError,
    GatewayTimeout,
    InvalidRequest,
    Message,
    ModelNotFound,
    PayloadTooLarge,
    RateLimited,
    Sampling,
    Unauthorized,
    Unavailable,
    UpstreamError,
    Usage,
)

USER = {"role": "user", "content": "hi"}


def body(**fields: Any) -> bytes:
    out: dict[str, Any] = {"model": "m", "max_tokens": 8, "messages": [USER]}
    out.update(fields)
    return json.dumps({k: v for k, v in out.items() if v is not ...}).encode()


def test_a_full_request_maps_onto_the_core_request() -> None:
    req = decode_messages(
        body(
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "And kind."}],
            messages=[
                USER,
                {"role": "assistant", "content": [{"type": "text", "text": "yes?"}]},
                {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]},
            ],
            max_tokens=100,
            stop_sequences=["END", "\n\n"],
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            metadata={"user_id": "u-1"},
            stream=True,
            tool_choice={"type": "none"},
            tools=[],
            thinking={"type": "disabled"},
        ),
        "rid",
    )
    assert req.request_id == "rid" and req.model == "m" and req.stream
    assert req.messages == (
        Message("system", "Be brief.\nAnd kind."),
        Message("user", "hi"),
        Message("assistant", "yes?"),
        Message("user", "a"),
    )
    assert req.sampling == Sampling(
        max_tokens=100, temperature=0.5, top_p=0.9, top_k=40, stop=("END", "\n\n")
    )


def test_a_json_schema_format_is_the_cores_structured_outputs() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "schema": schema}
    req = decode_messages(body(output_config={"format": fmt}), "rid")
    assert req.sampling.structured is not None
    assert req.sampling.structured.field == "output_config.format"
    assert json.loads(req.sampling.structured.json or "") == schema


def test_defaults() -> None:
    req = decode_messages(body(system="sys"), "rid")
    assert req.messages == (Message("system", "sys"), Message("user", "hi"))
    assert req.sampling == Sampling(max_tokens=8)
    assert not req.stream and req.priority is None


TOOL_USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "42"}


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"max_tokens": ...}, "max_tokens", "Missing"),
        ({"max_tokens": 0}, "max_tokens", "greater than 0"),
        ({"model": ""}, "model", "non-empty"),
        ({"messages": []}, "messages", "non-empty"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "'user'"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "Missing"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "string"),
        ({"messages": [USER, {"role": "assistant", "content": "pre"}]},
         "messages[1].role", "prefill"),
        ({"output_config": {"effort": "high"}}, "output_config.effort", "not supported"),
        ({"output_config": {"format": {"type": "xml"}}},
         "output_config.format.type", "json_schema"),
        ({"container": "c-1"}, "container", "not served"),
        ({"messages": [{"role": "user", "content": [{"type": "image"}]}]},
         "messages[0].content[0].type", "'image'"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]},
         "messages[0].content[0].text", "Missing"),
        ({"messages": [{"role": "user", "content": [TOOL_USE]}]},
         "messages[0].content[0].type", "assistant message"),
        ({"messages": [USER, {"role": "assistant", "content": [TOOL_RESULT]}, USER]},
         "messages[1].content[0].type", "user message"),
        ({"messages": [{"role": "user", "content": [{**TOOL_USE, "type": "server_tool_use"}]}]},
         "messages[0].content[0].type", "server tools"),
        ({"system": 3}, "system", "string"),
        ({"system": [{"type": "image"}]}, "system[0].type", "'image'"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema", "JSON schema"),
        ({"tool_choice": {"type": "auto"}}, "tool_choice", "`tools` must be set"),
        ({"tool_choice": "auto"}, "tool_choice", "object"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", "thinking"),
        ({"mcp_servers": [{}]}, "mcp_servers", "MCP"),
        ({"stop_sequences": "END"}, "stop_sequences", "array"),
        ({"stop_sequences": ["a", ""]}, "stop_sequences[1]", "empty"),
        ({"stop_sequences": ["a"] * 17}, "stop_sequences", "at most 16"),
        ({"temperature": 1.5}, "temperature", "between 0 and 1"),
        ({"top_p": 0}, "top_p", "greater than 0"),
        ({"top_k": -1}, "top_k", "at least 0"),
        ({"metadata": {"user_id": 5}}, "metadata.user_id", "string"),
        ({"stream": "yes"}, "stream", "boolean"),
    ],
)  # fmt: skip
def test_bad_bodies_are_400_naming_the_field(
    fields: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_messages(body(**fields), "rid")
    assert e.value.param == param
    assert words in e.value.message


@pytest.mark.parametrize("raw", [b"", b"[1]", b"{", b"\xff"])
def test_what_is_not_a_json_object_is_400(raw: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_messages(raw, "rid")


def test_count_tokens_takes_the_conversation_without_max_tokens() -> None:
    raw = json.dumps({"model": "m", "system": "s", "messages": [USER]}).encode()
    messages = (Message("system", "s"), Message("user", "hi"))
    assert decode_count_tokens(raw) == ("m", messages, None)
    tools = json.dumps({"model": "m", "messages": [USER], "tools": [{"name": "f"}]}).encode()
    with pytest.raises(InvalidRequest) as e:
        decode_count_tokens(tools)
    assert e.value.param == "tools[0].input_schema"
    tool = {"name": "f", "input_schema": {"type": "object"}}
    raw = json.dumps({"model": "m", "messages": [USER], "tools": [tool]}).encode()
    got = decode_count_tokens(raw)[2]
    assert got is not None and json.loads(got.tools)[0]["function"]["name"] == "f"


@pytest.mark.parametrize(
    ("err", "status", "kind"),
    [
        (InvalidRequest("x"), 400, "invalid_request_error"),
        (Unauthorized("x"), 401, "authentication_error"),
        (ModelNotFound("x"), 404, "not_found_error"),
        (PayloadTooLarge("x"), 413, "request_too_large"),
        (RateLimited("x"), 429, "rate_limit_error"),
        (Unavailable("x"), 529, "overloaded_error"),
        (GatewayTimeout("x"), 504, "timeout_error"),
        (UpstreamError("x"), 502, "api_error"),
        (GatewayError("x"), 500, "api_error"),
    ],
)
def test_errors_in_anthropics_shape(err: GatewayError, status: int, kind: str) -> None:
    got_status, raw = error_body(err)
    assert got_status == status
    assert json.loads(raw) == {"type": "error", "error": {"type": kind, "message": "x"}}
    event = error_event(err)
    assert event.startswith(b"event: error\ndata: ") and event.endswith(b"\n\n")
    assert json.loads(event.split(b"data: ", 1)[1]) == json.loads(raw)


@pytest.mark.parametrize(
    ("finish", "stop", "reason"),
    [
        (Finish.STOP, None, "end_turn"),
        (Finish.STOP, "END", "stop_sequence"),
        (Finish.LENGTH, None, "max_tokens"),
    ],
)
def test_stop_reasons(finish: Finish, stop: str | None, reason: str) -> None:
    assert encode.stop_reason(finish, stop) == reason
    msg = json.loads(encode.encode_message("rid", "m", "hello", finish, stop, Usage(5, 2)))
    assert msg == {
        "id": "msg_rid",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": reason,
        "stop_sequence": stop,
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }


def events(raw: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        out.append((name[7:], json.loads(data[6:])))
    return out


def test_a_stream_is_anthropics_event_sequence() -> None:
    enc = encode.EventEncoder("rid", "m")
    buf = bytearray()
    enc.start_into(buf, 7)
    enc.token_chunk_into(buf, "Hel")
    enc.token_chunk_into(buf, "lo \ud800")  # a lone surrogate is replaced, not an error
    enc.finish_into(buf, Finish.STOP, "END", 2)
    got = events(bytes(buf))
    assert [name for name, _ in got] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in got)
    start = got[0][1]["message"]
    assert start["id"] == "msg_rid" and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"] == {"input_tokens": 7, "output_tokens": 0}
    assert got[1][1]["content_block"] == {"type": "text", "text": ""}
    assert got[3][1] == {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hel"},
    }
    assert got[4][1]["delta"]["text"] == "lo \ufffd"
    assert got[6][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
        "usage": {"output_tokens": 2},
    }
