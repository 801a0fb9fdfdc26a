"""The Response object and the streaming events (gateway.api.responses.encode), checked
against the official openai SDK's own types."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from openai.types.responses import Response, ResponseStreamEvent
from shardgate.v1.parsed import ToolCallDelta

from gateway.api.responses.encode import Events, ResponseState, encode_response
from gateway.types import Finish, GatewayTimeout, Usage

_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def state(**fields: Any) -> ResponseState:
    return ResponseState("resp_abc", "m", instructions="sys", max_output_tokens=8, **fields)


def parse(body: bytes) -> Response:
    return Response.model_validate(json.loads(body))


def events_of(ev: Events) -> list[Any]:
    out = []
    for seq, data in ev.take():
        kind, line, blank = data.decode().split("\n", 2)
        assert kind.startswith("event: ") and line.startswith("data: ") and blank == "\n"
        event = _EVENT.validate_python(json.loads(line.removeprefix("data: ")))
        assert event.type == kind.removeprefix("event: ") and event.sequence_number == seq
        out.append(event)
    return out


def test_a_completed_response() -> None:
    s = state()
    s.texts += ["Hel", "lo"]
    s.finish(Finish.STOP, Usage(5, 2, 1))
    r = parse(encode_response(s))
    assert (r.id, r.status, r.model, r.instructions, r.max_output_tokens) == (
        "resp_abc",
        "completed",
        "m",
        "sys",
        8,
    )
    assert r.output_text == "Hello" and r.incomplete_details is None and r.error is None
    [item] = r.output
    assert item.type == "message" and item.id == "msg_abc" and item.status == "completed"
    assert r.usage is not None
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (5, 2, 7)
    assert r.usage.input_tokens_details.cached_tokens == 1


def test_an_incomplete_failed_and_queued_response() -> None:
    s = state()
    s.texts.append("x")
    s.finish(Finish.LENGTH, Usage(1, 8))
    r = parse(encode_response(s))
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens" and r.output[0].status == "incomplete"
    s = state()
    s.fail(GatewayTimeout("ran past its deadline"), None)
    r = parse(encode_response(s))
    assert r.status == "failed" and r.error is not None and r.error.code == "server_error"
    r = parse(encode_response(state(background=True)))
    assert r.status == "queued" and r.output == [] and r.background is True


def test_a_cancel_does_not_change_a_finished_response() -> None:
    s = state(background=True)
    s.cancel()
    assert s.status == "cancelled"
    s = state()
    s.finish(Finish.STOP, Usage(1, 1))
    s.cancel()
    assert s.status == "completed"


def test_the_events_of_a_stream_are_numbered_and_say_the_whole_text() -> None:
    s = state()
    ev = Events(s)
    ev.start()
    ev.open()
    for piece in ("a", "b\ud800"):  # (a lone surrogate: encoded as U+FFFD)
        ev.delta(piece)
        s.texts.append(piece)
    s.finish(Finish.STOP, Usage(3, 2))
    ev.close()
    ev.end()
    events = events_of(ev)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(10))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[6].text == "ab\ufffd" and events[-1].response.output_text == "ab\ufffd"
    assert events[8].item.content[0].text == "ab\ufffd"
    assert {e.item_id for e in events[3:8]} == {"msg_abc"}
    assert ev.take() == []


def test_a_failed_stream_ends_with_response_failed() -> None:
    s = state()
    ev = Events(s)
    ev.start()
    s.fail(GatewayTimeout("late"), Usage(1, 0))
    ev.end()
    events = events_of(ev)
    assert events[-1].type == "response.failed" and events[-1].sequence_number == 2
    assert events[-1].response.error.message == "late"


def test_function_calls_are_output_items_after_the_message() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {}}]
    s = state(tools=tools)
    ev = Events(s)
    ev.start()
    ev.open()
    ev.delta("Checking.")
    s.texts.append("Checking.")
    s.add_call(ToolCallDelta(index=0, id="call-1", name="f", arguments='{"a"'))
    s.add_call(ToolCallDelta(index=0, arguments=": 1}"))
    s.add_call(ToolCallDelta(index=1, id="call-2", name="g", arguments="{}"))
    s.finish(Finish.STOP, Usage(3, 9))
    ev.close()
    ev.calls()
    ev.end()
    events = events_of(ev)
    kinds = [e.type for e in events[8:]]
    per_call = [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert kinds == [*per_call, *per_call, "response.completed"]
    assert [e.output_index for e in events[8:16]] == [1] * 4 + [2] * 4
    assert events[10].arguments == '{"a": 1}' and events[10].name == "f"
    r = events[-1].response
    assert r.tools[0].name == "f" and r.tool_choice == "auto"
    message, first, second = r.output
    assert message.type == "message" and r.output_text == "Checking."
    assert first.type == "function_call" and second.type == "function_call"
    assert (first.call_id, first.name, first.arguments) == ("call-1", "f", '{"a": 1}')
    assert (second.call_id, second.name, second.arguments) == ("call-2", "g", "{}")
    assert parse(encode_response(s)).output == r.output


def test_calls_without_text_have_no_message() -> None:
    s = state()
    ev = Events(s)
    s.add_call(ToolCallDelta(index=0, id="c", name="f", arguments="{}"))
    s.finish(Finish.STOP, Usage(1, 1))
    ev.calls()
    events = events_of(ev)
    assert events[0].output_index == 0
    [call] = parse(encode_response(s)).output
    assert call.type == "function_call"
